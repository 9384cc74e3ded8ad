"""ensemble: K agents answer one problem, each under a different instruction variant; the team
answer is their majority vote (or a judge model's pick among their answers)."""
