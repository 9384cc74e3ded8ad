"""The ratings ladder as a PNG: per game, each player's rating with its 95% interval, and its
score against the reference opponent with its Wilson interval (matplotlib's object API on the
Agg canvas, as in ``evaluation.plots``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evaluation.ratings import START, Ladder


def ladder_plot(ladders: Sequence[Ladder], path: Path, title: str = "ratings") -> Path:
    """Write one row of two panels per ladder, players best first from the top."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    height = sum(1.2 + 0.32 * len(ladder.ratings) for ladder in ladders)
    figure = Figure(figsize=(10.0, height + 0.6), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    axes = figure.subplots(len(ladders), 2, squeeze=False,
                           gridspec_kw={"height_ratios": [len(ladder.ratings) + 2 for ladder in ladders]})
    for (rating_ax, versus_ax), ladder in zip(axes, ladders, strict=True):
        players = [_short(r.player, 28) for r in ladder.ratings]
        y = list(range(len(players)))[::-1]
        _intervals(rating_ax, y, [(r.rating, r.low, r.high) for r in ladder.ratings], "tab:blue")
        rating_ax.axvline(START, color="tab:gray", linewidth=0.8, linestyle=":")
        rating_ax.set_yticks(y, players, fontsize=8)
        rating_ax.set_title(f"{ladder.game}: rating, 95% interval ({ladder.games} rated games)", fontsize=10)
        rating_ax.grid(True, axis="x", alpha=0.3)
        shown = [(yy, r.versus) for yy, r in zip(y, ladder.ratings, strict=True)
                 if r.versus is not None and r.versus.value is not None and r.versus.low is not None]
        _intervals(versus_ax, [yy for yy, _ in shown], [(100 * v.value, 100 * v.low, 100 * v.high) for _, v in shown],
                   "tab:orange")
        versus_ax.axvline(50, color="tab:gray", linewidth=0.8, linestyle=":")
        versus_ax.set_xlim(-3, 103)
        versus_ax.set_ylim(rating_ax.get_ylim())
        versus_ax.set_yticks(y, ["" for _ in y])
        against = _short(ladder.reference, 28) if ladder.reference else "no reference"
        versus_ax.set_title(f"score against {against} (%, ties half)", fontsize=10)
        versus_ax.grid(True, axis="x", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def _short(label: str, width: int) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def _intervals(ax, y: list[int], points: list[tuple[float, float, float]], colour: str) -> None:
    """Each (value, low, high) as a dot on a bar spanning its interval (drawn about the
    interval's middle: a Wilson interval need not be centred on its value)."""
    ax.plot([value for value, _, _ in points], y, "o", color=colour, zorder=3)
    ax.errorbar([(low + high) / 2 for _, low, high in points], y, xerr=[(high - low) / 2 for _, low, high in points],
                fmt="none", ecolor="tab:gray", capsize=4)
