"""Figures by task family and the rule that calls a family worse beyond noise
(evaluation.families), on hand-made outcomes."""

from __future__ import annotations

import pytest

from evaluation.families import by_family, compare_families, family_of, paired_by_family, worse_beyond_noise
from graphs.metrics.stats import paired
from graphs.tasks import load_tasks
from graphs.tasks.base import Task


def _tasks(**counts: int) -> list[Task]:
    return [Task(f"{family}-{i}", "q", "1", "made", meta={"family": family})
            for family, n in counts.items() for i in range(n)]


def test_a_task_reports_under_its_family_its_subject_or_else_its_source() -> None:
    assert family_of(Task("a", "q", "1", "arithmetic", meta={"family": "mul", "subject": "x"})) == "mul"
    assert family_of(Task("b", "q", "1", "math500.jsonl", meta={"subject": "Algebra"})) == "Algebra"
    assert family_of(Task("c", "q", "1", "gsm8k_test.jsonl")) == "gsm8k_test.jsonl"
    generated = load_tasks("arithmetic:1", n=20, seed=0, split="unseen")
    assert {family_of(t) for t in generated} == {"add", "sub", "mul", "div", "compare"}


def test_each_family_gets_its_own_rate_and_interval() -> None:
    tasks = _tasks(add=4, mul=2)
    outcomes = {"add-0": 1.0, "add-1": 1.0, "add-2": 0.0, "add-3": 1.0, "mul-0": 0.0, "mul-1": 0.0}
    found = by_family(outcomes, tasks)
    assert (found["add"].value, found["add"].n, found["mul"].value, found["mul"].n) == (0.75, 4, 0.0, 2)
    assert found["mul"].high > 0.5  # two tasks say little
    assert by_family({"add-0": 1.0}, tasks).keys() == {"add"}  # a family with no outcome is left out


@pytest.mark.parametrize(("lost", "gained", "worse"), [
    (4, 0, False),   # the bootstrap interval excludes 0 but p = 0.125: noise on ten tasks
    (6, 0, True),    # p = 0.031
    (7, 1, False),   # p = 0.070
    (0, 0, False),
])
def test_worse_beyond_noise_needs_the_interval_below_zero_and_p_below_005(lost: int, gained: int,
                                                                          worse: bool) -> None:
    n = 10
    candidate = {f"t{i}": 0.0 if i < lost else 1.0 for i in range(n)}
    baseline = {f"t{i}": 1.0 if i < lost else (0.0 if i < lost + gained else 1.0) for i in range(n)}
    assert worse_beyond_noise(paired(candidate, baseline)) is worse


def test_worse_families_name_the_family_and_the_set_and_ignore_the_others() -> None:
    tasks = _tasks(add=20, mul=20)
    baseline = {t.id: 1.0 if t.id.startswith("mul") else 0.0 for t in tasks}
    candidate = {t.id: 1.0 if t.id.startswith("add") else 0.0 for t in tasks}
    compared = paired_by_family(candidate, baseline, tasks)
    assert (compared["add"].better, compared["mul"].worse) == (20, 20)
    found = compare_families("unseen", candidate, baseline, tasks)[1]
    assert [(f.evaluation, f.family) for f in found] == [("unseen", "mul")]
    assert found[0].describe().startswith("family mul (unseen) -100.0 pts [-100.0, -100.0] n=20, 0 better, 20 worse")


def test_only_pass_fail_metrics_are_guarded_by_family() -> None:
    """Per-task contributions to a ratio (a critic's balanced accuracy) do not average to a
    family's own ratio: their families are reported, never refused."""
    tasks = _tasks(add=12)
    baseline = {t.id: 0.9 for t in tasks}
    candidate = {t.id: 0.1 for t in tasks}
    assert worse_beyond_noise(paired(candidate, baseline))  # it would be, as a pass rate
    assert compare_families("unseen", candidate, baseline, tasks)[1] == []
    assert paired_by_family(candidate, baseline, tasks)["add"].worse == 12  # still compared and reported
    binary = {t.id: 0.0 for t in tasks}
    assert [f.family for f in compare_families("unseen", binary, {t.id: 1.0 for t in tasks}, tasks)[1]] == ["add"]
