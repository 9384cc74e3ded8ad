"""Which training tasks a policy still gets wrong: a greedy screen before online RL.

GRPO learns from a task only where its sampled answers differ in reward, and the answer the
gate and ``sparring eval`` measure is the greedy one. The screen plays each candidate task
once, greedily (an evaluation like any other: logged as a run of its own, in the deciding
precision, remembered), and keeps the tasks whose outcome on the role's gate metric fell short
of full marks. Training on those alone can teach the policy the habits of lucky samples (on the
bundled model: short answers without working, docs/results/2026-11-28-reinforcement.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from evaluation.evaluator import Evaluator
from graphs.policies.policy import Policy
from graphs.tasks.base import Task


class ScreenError(ValueError):
    """The screen cannot choose tasks; the message says why and what to do instead."""


@dataclass(frozen=True)
class Screened:
    kept: list[Task]
    """the screened tasks the policy did not get right, in their original order"""
    played: int
    failed: int
    """episodes that failed (their tasks are left out: nothing is known about them)"""
    metric: str
    run_id: str

    def describe(self) -> str:
        return (f"screened {self.played} tasks greedily ({self.metric}, run {self.run_id[:12]}): {len(self.kept)} "
                f"not right, kept" + (f"; {self.failed} failed episodes left out" if self.failed else ""))


async def not_right(evaluate: Evaluator, policies: Mapping[str, Policy], role: str) -> Screened:
    """Play ``evaluate``'s tasks once with ``policies`` and keep those whose per-task outcome on
    ``role``'s gate metric is below 1 (math-reflection's actor: its first answer was wrong)."""
    metric = evaluate.game.gate_metric(role).name
    result = await evaluate(policies, label=f"screen for {role}")
    outcomes = result.per_task.get(metric)
    if not outcomes:
        raise ScreenError(f"the screen's run {result.run_id[:12]} gave no task an outcome on {metric}, {role}'s "
                          f"gate metric ({result.failed} of {result.episodes} episodes failed: `sparring episodes list "
                          f"--run {result.run_id}`), so it cannot tell which tasks {role} gets wrong; fix what failed, "
                          "or train without --screen")
    kept = [t for t in evaluate.tasks if t.id in outcomes and outcomes[t.id] < 1.0]
    return Screened(kept, len(evaluate.tasks), result.failed, metric, result.run_id)
