"""Figures by task family, and the rule that says a family got worse beyond noise.

A total can rise while one kind of problem falls (a round that practises addition may unlearn
multiplication), so evaluations also report each family of tasks on its own: the generator's
families (``add``, ``mul-sub``...: an operation and a number of steps), the ``family`` (or
MATH ``subject``) of a task file's rows, else the file itself as one family.

A family is **worse beyond noise** when its paired 95% interval (candidate minus baseline) lies
wholly below zero and McNemar's exact p on its discordant tasks is below 0.05. Only pass/fail
metrics are guarded this way (``guarded``); families of a ratio are reported, not guarded.
With a dozen families of ten to fifty tasks each, both must hold: a bootstrap interval alone
is too narrow on ten tasks (4 lost, none gained already excludes zero, p=0.125).
Families are not corrected for their number; the rule refuses large drops, not one lost task.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from graphs.metrics.stats import Estimate, PairedComparison, mean_estimate, paired
from graphs.tasks.base import Task

SIGNIFICANCE = 0.05


def family_of(task: Task) -> str:
    """The family a task is reported under."""
    meta = task.meta or {}
    return str(meta.get("family") or meta.get("subject") or task.source)


def families(tasks: Iterable[Task]) -> dict[str, list[str]]:
    """family -> the ids of its tasks, in task order."""
    found: dict[str, list[str]] = {}
    for task in tasks:
        found.setdefault(family_of(task), []).append(task.id)
    return found


def by_family(outcomes: Mapping[str, float], tasks: Iterable[Task]) -> dict[str, Estimate]:
    """Each family's mean outcome (``outcomes``: task id -> outcome) with its 95% interval;
    families none of whose tasks has an outcome are left out."""
    found = {}
    for family, ids in families(tasks).items():
        values = [outcomes[i] for i in ids if i in outcomes]
        if values:
            found[family] = mean_estimate(values)
    return found


def paired_by_family(candidate: Mapping[str, float], baseline: Mapping[str, float],
                     tasks: Iterable[Task]) -> dict[str, PairedComparison]:
    """Each family's paired comparison, on the tasks of it both have an outcome for."""
    found = {}
    for family, ids in families(tasks).items():
        shared = [i for i in ids if i in candidate and i in baseline]
        if shared:
            found[family] = paired({i: candidate[i] for i in shared}, {i: baseline[i] for i in shared})
    return found


def worse_beyond_noise(comparison: PairedComparison) -> bool:
    """The module docstring's rule."""
    high = comparison.difference.high
    if high is None or high >= 0:
        return False
    return comparison.p_value is None or comparison.p_value < SIGNIFICANCE


@dataclass(frozen=True)
class FamilyFinding:
    """A family a candidate did worse on beyond noise, in one evaluation set."""

    evaluation: str
    """the set's label (e.g. the split)"""
    family: str
    comparison: PairedComparison

    def describe(self) -> str:
        return f"family {self.family} ({self.evaluation}) {self.comparison.difference.signed()}, " \
               f"{self.comparison.better} better, {self.comparison.worse} worse, p={self.comparison.p_text()}"


def guarded(candidate: Mapping[str, float], baseline: Mapping[str, float]) -> bool:
    """Whether the families of a metric are guarded: only pass/fail outcomes, whose family mean
    is the family's own rate. A ratio's per-task outcomes (a critic's balanced accuracy) are
    contributions to the whole set's ratio, so their mean over a family is not the family's
    ratio: on a family of wrong answers only it weighs one recall, and a critic that trades a
    little of it for the other recall would be refused there while it improved overall."""
    return all(v in (0.0, 1.0) for v in (*candidate.values(), *baseline.values()))


def compare_families(evaluation: str, candidate: Mapping[str, float], baseline: Mapping[str, float],
                     tasks: Iterable[Task]) -> tuple[dict[str, PairedComparison], list[FamilyFinding]]:
    """One evaluation set's families compared (``paired_by_family``), and those worse beyond
    noise (none for a metric whose families are not ``guarded``)."""
    compared = paired_by_family(candidate, baseline, tasks)
    if not guarded(candidate, baseline):
        return compared, []
    return compared, [FamilyFinding(evaluation, family, c) for family, c in compared.items()
                      if worse_beyond_noise(c)]
