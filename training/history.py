"""A training job's history: the trainer's log entries, kept with the job row.

Each entry is what the trainer logged at one step (every ``logging_steps`` optimiser steps):
``step``, ``epoch``, ``loss``, ``learning_rate``, ``grad_norm`` and the trainer's own (DPO:
``rewards/margins``, ``rewards/accuracies``, ``logps/chosen``...; KTO: ``kl``; GRPO:
``reward``, ``kl``...; PPO: ``pg_loss``, ``kl``, ``ratio_mean``, ``clip_fraction``). TRL's
trainers end with one summary entry (``train_runtime``, ``train_loss``...), which is kept too
but is not a step. JSON has no NaN or infinity, so a non-finite value is stored as null.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HistoryEntry = dict[str, float | None]
SUMMARY_KEY = "train_runtime"
"""Present in the summary entry TRL's trainers log at the end of a run, and in no step entry."""
PREFERRED = (
    "loss", "learning_rate", "rewards/margins", "rewards/accuracies", "reward", "reward_std",
    "frac_reward_zero_std", "frac_zero_advantage", "kl", "clip_fraction", "grad_norm", "ratio_mean", "pg_loss", "entropy",
)  # fmt: skip
"""The metrics shown first (when a trainer logs them), most telling first."""
NOT_METRICS = ("step", "epoch")


def storable(entry: Mapping[str, Any]) -> HistoryEntry:
    """A log entry as the job row keeps it: numbers only, non-finite ones as None."""
    return {
        key: (float(value) if math.isfinite(value) else None)
        for key, value in entry.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def steps(history: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The step entries of a history (the run's summary entry left out)."""
    return [entry for entry in history if SUMMARY_KEY not in entry]


def metric_names(history: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every metric the step entries hold, the ``PREFERRED`` ones first, then by name."""
    present = {key for entry in steps(history) for key in entry if key not in NOT_METRICS}
    return [name for name in PREFERRED if name in present] + sorted(present - set(PREFERRED))


def learning_signals(history: Sequence[Mapping[str, Any]], most: int = 6) -> list[str]:
    """The ``most`` metrics that best tell whether a run learns (``metric_names``' order, without
    the learning rate, which the schedule sets)."""
    return [name for name in metric_names(history) if name != "learning_rate"][:most]


def plot(history: Sequence[Mapping[str, Any]], metrics: Sequence[str], path: Path, title: str) -> Path:
    """Write a PNG with one panel per metric against the step (a missing value leaves a gap)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    entries = steps(history)
    columns = min(3, max(1, len(metrics)))
    rows = max(1, math.ceil(len(metrics) / columns))
    figure = Figure(figsize=(4.2 * columns, 3.0 * rows + 0.6), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
    for ax, name in zip(axes, metrics, strict=False):
        points = [(e["step"], e[name]) for e in entries if e.get(name) is not None and e.get("step") is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], "o-" if len(points) < 30 else "-", color="tab:blue")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path
