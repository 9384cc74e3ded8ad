"""The metrics of code-debug, from the store: the fixer's rewards (with the judge's status in
their info) and the judgments.

Per task (means over its episodes): tests_pass_rate (the first fix passes every test within
the limits: the fixer's gate), final_pass_rate (the last fix, with --attempts above 1),
tests_passed_fraction (the share of tests the first fix passes, 0 after a violation).
Over fixes (Wilson intervals, n = fixes): violation_rate (a sandbox limit reached or a
forbidden action tried), syntax_error_rate (the code does not compile), no_code_rate (the
answer holds no code). With a breaker: bug_valid_rate (its code was a bug that fails a test).
With a judge model: code_quality (its mean score of the last fix, 0..1).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from sqlalchemy import Engine

from graphs.code_debug.credit import BUG_VALID, TESTS_PASSED
from graphs.code_debug.judge import NO_CODE
from graphs.code_debug.prompts import QUALITY
from graphs.credit import CORRECT
from graphs.metrics.run_metrics import RunMetrics, per_task_means, ratio, task_means
from graphs.sandbox import Status
from storage.metric_rows import run_judgments, run_rewards, turn_rewards


@dataclass(frozen=True)
class _Fix:
    correct: float
    share: float
    status: str


@dataclass(frozen=True)
class _Counts:
    fixes: int
    violations: int
    syntax_errors: int
    no_code: int


def code_debug_metrics(engine: Engine, run_id: str) -> RunMetrics:
    found: dict[str, dict[int, dict[str, float | str]]] = defaultdict(dict)
    task_of: dict[str, str] = {}
    for turn in turn_rewards(engine, run_id, names=(CORRECT, TESTS_PASSED), seats=("fixer",), unrewarded=False):
        task_of[turn.episode_id] = turn.task_id
        fix = found[turn.episode_id].setdefault(turn.idx, {"status": turn.info.get("status", "")})
        fix[turn.reward] = turn.value
    quality = [(j.task_id, j.score) for j in run_judgments(engine, run_id, rubrics=(QUALITY.name,))
               if j.score is not None]
    bug_valid = [(r.task_id, r.value) for r in run_rewards(engine, run_id, names=(BUG_VALID,))]
    fixes = {episode: [_Fix(float(f.get(CORRECT, 0.0)), float(f.get(TESTS_PASSED, 0.0)), str(f["status"]))
                       for _, f in sorted(by_idx.items())] for episode, by_idx in found.items()}
    outcomes = {
        "tests_pass_rate": [(task_of[e], f[0].correct) for e, f in fixes.items()],
        "final_pass_rate": [(task_of[e], f[-1].correct) for e, f in fixes.items()],
        "tests_passed_fraction": [(task_of[e], f[0].share) for e, f in fixes.items()],
    }
    if quality:
        outcomes["code_quality"] = [(task, float(score)) for task, score in quality]
    if bug_valid:
        outcomes["bug_valid_rate"] = [(task, float(value)) for task, value in bug_valid]
    result = task_means({name: per_task_means(pairs) for name, pairs in outcomes.items()})
    counts = _counts(fixes, task_of)
    for name, count in (("violation_rate", lambda c: c.violations), ("syntax_error_rate", lambda c: c.syntax_errors),
                        ("no_code_rate", lambda c: c.no_code)):
        result.metrics[name], result.per_task[name] = ratio(counts, count, lambda c: c.fixes)
    return result


def _counts(fixes: dict[str, list[_Fix]], task_of: dict[str, str]) -> dict[str, _Counts]:
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    for episode, episode_fixes in fixes.items():
        for fix in episode_fixes:
            tally[task_of[episode]][fix.status] += 1
            tally[task_of[episode]]["fixes"] += 1
    return {task: _Counts(c["fixes"], c[Status.VIOLATION], c[Status.SYNTAX_ERROR], c[NO_CODE])
            for task, c in tally.items()}
