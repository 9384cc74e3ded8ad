"""What a game's metrics return, and the pieces they are built from.

Every metric is an ``Estimate`` (value, n, 95% interval) and comes with its per-task
outcomes (task id -> float), so two runs on the same tasks can be compared paired
(``graphs.metrics.stats.paired``). Only succeeded episodes count; a task played several times
gets the mean of its episodes.

Ratios over events (turns, reviews) get a Wilson interval with n = events. Their per-task
outcomes are the tasks' linearised contributions (delta method): for R = sum(num) / sum(den)
over tasks, task t contributes R + (num_t - R den_t) / mean(den), so the mean over tasks is R
exactly and a paired difference of two runs has the ratio's own uncertainty.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from graphs.metrics.stats import Estimate, mean_estimate, ratio_estimate

C = TypeVar("C")


@dataclass(frozen=True)
class RunMetrics:
    metrics: dict[str, Estimate] = field(default_factory=dict)
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)
    """metric name -> task id -> the task's outcome (mean over tasks = the metric)"""

    def values(self) -> dict[str, float | None]:
        """The bare values, rounded, for summaries that show no intervals."""
        return {name: None if e.value is None else round(e.value, 4) for name, e in self.metrics.items()}

    def merged(self, other: RunMetrics) -> RunMetrics:
        return RunMetrics({**self.metrics, **other.metrics}, {**self.per_task, **other.per_task})


def per_task_means(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """task id -> mean of its episodes' values."""
    sums: dict[str, list[float]] = defaultdict(list)
    for task, value in pairs:
        sums[task].append(value)
    return {task: sum(v) / len(v) for task, v in sums.items()}


def task_means(per_task: dict[str, dict[str, float]]) -> RunMetrics:
    """Metrics that are means over tasks of per-task outcomes (metric -> task -> outcome)."""
    return RunMetrics({name: mean_estimate(list(values.values())) for name, values in per_task.items()}, per_task)


def ratio(tasks: Mapping[str, C], num: Callable[[C], int],
          den: Callable[[C], int]) -> tuple[Estimate, dict[str, float]]:
    """The ratio sum(num) / sum(den) over tasks' counts (Wilson over the counted events) and
    each task's linearised contribution (see the module docstring); empty when nothing was counted."""
    total_num, total_den = sum(num(c) for c in tasks.values()), sum(den(c) for c in tasks.values())
    if total_den == 0:
        return Estimate(None, 0), {}
    value, mean_den = total_num / total_den, total_den / len(tasks)
    return ratio_estimate(total_num, total_den), {
        task: value + (num(c) - value * den(c)) / mean_den for task, c in tasks.items()
    }
