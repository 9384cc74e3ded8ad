"""Learning plots: each metric per adapter version or retrain round, with its 95% interval bars.

Drawn with matplotlib's object API on the Agg canvas (no pyplot, no display, no global
state), one PNG holding a small panel per metric. Figures are fractions and drawn in percent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from graphs.metrics.stats import Estimate

PANEL_COLUMNS = 3


def metric_panels(stages: Sequence[str], metrics: Mapping[str, Sequence[Estimate | None]], path: Path,
                  title: str, *, full_scale: bool = False) -> Path:
    """Write a PNG with one panel per metric: its value at each stage (x axis, in order) with
    the 95% interval as error bars; a stage without the figure leaves a gap. ``full_scale``:
    every panel from 0 to 100%, so that panels of one kind (task families) compare at a glance."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    names = list(metrics)
    columns = max(1, min(PANEL_COLUMNS, len(names)))
    rows = max(1, math.ceil(len(names) / columns))
    figure = Figure(figsize=(4.2 * columns, 3.0 * rows + 0.6), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
    positions = list(range(len(stages)))
    for ax, name in zip(axes, names, strict=False):
        shown = [(x, e) for x, e in zip(positions, metrics[name], strict=True) if e is not None and e.value is not None]
        ax.plot([x for x, _ in shown], [100 * e.value for _, e in shown], "o-", color="tab:blue", zorder=3)
        # the bar spans the interval itself (drawn about its middle): a bootstrap interval need not contain the value
        bounded = [(x, e) for x, e in shown if e.low is not None and e.high is not None]
        ax.errorbar([x for x, _ in bounded], [50 * (e.low + e.high) for _, e in bounded],
                    yerr=[50 * (e.high - e.low) for _, e in bounded], fmt="none", capsize=4, ecolor="tab:gray")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("%")
        ax.set_xticks(positions, [_short(s) for s in stages], rotation=20 if len(stages) > 3 else 0, fontsize=8)
        ax.set_xlim(-0.5, len(stages) - 0.5)
        if full_scale:
            ax.set_ylim(-2, 102)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def _short(label: str, width: int = 22) -> str:
    """Each line of a tick label cut to ``width`` characters."""
    return "\n".join(line if len(line) <= width else line[: width - 1] + "…" for line in label.splitlines())
