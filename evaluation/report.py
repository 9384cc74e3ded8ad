"""What a store has learned, read from its runs: evaluation series and retrain rounds.

Every finished evaluation run keeps its figures in its summary (``evaluation.evaluator``:
metrics as Estimates, each seat's policy, a label, the number of tasks). Evaluations of the
same game on the same tasks with the same seed and options form a *series*: their figures
are comparable, and each point of it is one policy set (``base``, ``actor@v1 critic@v1``...),
in the order they were first measured. Retrain rounds are runs whose summary lists each role's
outcome and, where a candidate was gated, the paired comparison that decided it.

``write_page`` draws every series (``evaluation.plots``) and writes one HTML page with the
PNGs beside it.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, make_url

from evaluation.plots import metric_panels
from evaluation.ratings import Ladder, ladders
from graphs.metrics.stats import Estimate
from graphs.seats import is_rules
from storage.evaluation_rows import finished_runs

PAGE = "index.html"


@dataclass(frozen=True)
class Point:
    """One policy set's figures in a series (its latest evaluation)."""

    policies: dict[str, str]
    metrics: dict[str, Estimate]
    run_id: str
    label: str
    started_at: datetime
    families: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    """metric -> task family -> figure (empty for tasks of one family)"""

    @property
    def name(self) -> str:
        return policies_name(self.policies)


@dataclass
class Series:
    """Comparable evaluations: one game, task set, seed and options."""

    game: str
    tasks: int
    options: dict[str, Any]
    points: list[Point] = field(default_factory=list)
    set_name: str = ""
    """the task set's name (a split, a file), when the evaluations recorded it"""

    @property
    def title(self) -> str:
        turns = self.options.get("turns")
        named = f" {self.set_name}" if self.set_name else ""
        return f"{self.game}: {self.tasks}{named} tasks" + (f", {turns} turns" if turns else "")

    def metric_names(self) -> list[str]:
        names: dict[str, None] = {}
        for point in self.points:
            names.update(dict.fromkeys(point.metrics))
        return list(names)

    def table(self, shown: list[int] | None = None) -> list[dict[str, Any]]:
        """One row per metric, a column ``#i`` per point (``Estimate.format``); ``shown``: the
        points' indexes (0-based; default all)."""
        shown = list(range(len(self.points))) if shown is None else shown
        return [{"metric": name, **{f"#{i + 1}": _formatted(self.points[i].metrics.get(name)) for i in shown}}
                for name in self.metric_names()]

    def legend(self, shown: list[int] | None = None) -> list[str]:
        """``#i: policy set (label)`` for the table's columns."""
        shown = list(range(len(self.points))) if shown is None else shown
        return [f"#{i + 1}: {self.points[i].name} ({self.points[i].label})" for i in shown]

    def records(self) -> list[dict[str, Any]]:
        """One row per point and metric, for programs."""
        return [{"game": self.game, "tasks": self.tasks, "policies": p.name, "run_id": p.run_id, "label": p.label,
                 "metric": name, **estimate.to_dict()}
                for p in self.points for name, estimate in p.metrics.items()]


@dataclass(frozen=True)
class PageSection:
    """A section another layer adds to the page (``write_page``): a heading, PNGs it has
    written into the page's folder (file name, alt text) and tables (rows, caption)."""

    title: str
    images: list[tuple[str, str]] = field(default_factory=list)
    tables: list[tuple[list[dict[str, Any]], str | None]] = field(default_factory=list)

    def html(self) -> str:
        images = "".join(f"<img src=\"{_e(name)}\" alt=\"{_e(alt)}\">\n" for name, alt in self.images)
        tables = "".join(_html_table(rows, caption) for rows, caption in self.tables)
        return f"<h2>{_e(self.title)}</h2>\n{images}{tables}"


@dataclass
class StoreReport:
    series: list[Series]
    rounds: list[dict[str, Any]]
    ladders: list[Ladder] = field(default_factory=list)
    """the ratings of each game's players (``evaluation.ratings``), when it has rated games"""

    @property
    def empty(self) -> bool:
        return not self.series and not self.rounds and not self.ladders


def policies_name(policies: dict[str, str]) -> str:
    """``base`` when every model seat is the base model; else the seats that differ from it:
    adapter versions by name, anything else as SEAT=POLICY (rule judges left out)."""
    shown = {seat: p for seat, p in policies.items() if p != "base" and not is_rules(p)}
    named = [p if "@" in p else f"{seat}={p}" for seat, p in sorted(shown.items())]
    return " ".join(named) or "base"


def read_report(engine: Engine) -> StoreReport:
    """The store's evaluation series and retrain rounds, oldest first."""
    series: dict[str, Series] = {}
    rounds: list[dict[str, Any]] = []
    for run in finished_runs(engine):
        summary = run.summary
        if isinstance(summary.get("metrics"), dict) and isinstance(summary.get("policies"), dict):
            key = (run.config or {}).get("evaluation") or {}
            comparable = ({k: v for k, v in key.items() if k != "seats"}
                          or {"game": run.game, "tasks": summary.get("tasks")})
            one = series.setdefault(_digest(comparable), Series(run.game, int(summary.get("tasks") or 0),
                                                                key.get("options") or {},
                                                                set_name=str(summary.get("set") or "")))
            metrics = {name: Estimate.from_dict(e) for name, e in summary["metrics"].items()}
            families = {name: {f: Estimate.from_dict(e) for f, e in found.items()}
                        for name, found in (summary.get("families") or {}).items()}
            point = Point(dict(summary["policies"]), metrics, run.id, str(summary.get("label", "")), run.started_at,
                          families)
            _add(one, point)
        elif "roles" in summary and "round" in summary:
            rounds.extend(_round_rows(run.id, run.started_at, summary))
    return StoreReport([s for s in series.values() if s.points], rounds, ladders(engine))


def _add(series: Series, point: Point) -> None:
    """A policy set keeps its place (its first evaluation) and its latest figures."""
    for i, earlier in enumerate(series.points):
        if earlier.name == point.name:
            series.points[i] = point
            return
    series.points.append(point)


def _round_rows(run_id: str, started_at: datetime, summary: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for role in summary.get("roles") or []:
        gate = role.get("gate") or {}
        comparison = gate.get("comparison") or {}
        difference = Estimate.from_dict(comparison["difference"]) if comparison.get("difference") else None
        rows.append({
            "started_at": started_at, "round": summary.get("round"), "role": role.get("role"),
            "status": role.get("status"), "rows": role.get("rows"), "candidate": role.get("candidate"),
            "gate_metric": gate.get("metric"), "run_id": run_id,
            "change": difference.signed(with_n=False) if difference else None,
            "difference": difference.to_dict() if difference else None,
        })
    return rows


def _formatted(estimate: Estimate | None) -> str | None:
    return None if estimate is None else estimate.format()


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def figure_path(database_url: str, data_dir: Path, name: str) -> Path:
    """A file beside the store: next to a SQLite file (``store.db`` -> ``store-NAME``), in the
    data directory for other databases."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        database = Path(url.database)
        return database.with_name(f"{database.stem}-{name}")
    return Path(data_dir) / name


def write_page(report: StoreReport, out_dir: Path, *, store: str, more: Sequence[PageSection] = ()) -> Path:
    """Draw every series into ``out_dir`` (one PNG each, policy sets numbered #1, #2... on the
    x axis) and write ``out_dir/index.html``, which shows them with their tables, the retrain
    rounds, the ratings and then ``more``; returns the page's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = []
    for index, series in enumerate(report.series, start=1):
        names = series.metric_names()
        png = metric_panels([f"#{i}\n" + "\n".join(p.name.split()) for i, p in enumerate(series.points, start=1)],
                            {m: [p.metrics.get(m) for p in series.points] for m in names},
                            out_dir / f"series-{index}.png", series.title)
        by_family = _family_plot(series, out_dir / f"series-{index}-families.png")
        sections.append(
            f"<h2>{_e(series.title)}</h2>\n<img src=\"{_e(png.name)}\" alt=\"{_e(series.title)}: each metric per "
            f"policy set, with 95% intervals\">\n"
            + (f"<img src=\"{_e(by_family.name)}\" alt=\"{_e(series.title)}: the first metric by task family, "
               f"one panel each\">\n" if by_family else "")
            + _html_table(series.table(), caption="value [95% interval] n per policy set, in the order first measured")
            + _html_table([{"#": i, "policy set": p.name, "label": p.label, "run": p.run_id,
                            "measured": p.started_at.strftime("%Y-%m-%d %H:%M")}
                           for i, p in enumerate(series.points, start=1)])
        )
    if report.rounds:
        columns = ["started_at", "round", "role", "status", "rows", "candidate", "gate_metric", "change"]
        rows = [{c: (r[c].strftime("%Y-%m-%d %H:%M") if c == "started_at" else r[c]) for c in columns}
                for r in report.rounds]
        sections.append("<h2>Retrain rounds</h2>\n" + _html_table(
            rows, caption="change: the gated candidate minus the active version on the gate metric, paired by task"))
    if report.ladders:
        from evaluation.ladder_plot import ladder_plot

        png = ladder_plot(report.ladders, out_dir / "ratings.png")
        sections.append(f"<h2>Ratings</h2>\n<img src=\"{png.name}\" alt=\"each policy's rating and its score against "
                        "a reference opponent, with 95% intervals\">\n"
                        + "".join(_html_table(ladder.table(), caption=f"{ladder.game}: {ladder.games} rated games; "
                                              f"vs reference: score against {ladder.reference or '-'} (ties half)")
                                  for ladder in report.ladders))
    sections += [section.html() for section in more]
    page = out_dir / PAGE
    page.write_text(_PAGE.format(store=_e(store), sections="\n".join(sections)), encoding="utf-8")
    return page


def _family_plot(series: Series, path: Path) -> Path | None:
    """One panel per task family of the series' first metric, a point per policy set: a skill
    that narrows shows as one panel falling while the others rise. None when the series'
    tasks are of one family."""
    metric = next((m for m in series.metric_names() if any(m in p.families for p in series.points)), None)
    if metric is None:
        return None
    families = list(dict.fromkeys(f for p in series.points for f in p.families.get(metric, {})))
    stages = [f"#{i}\n" + "\n".join(p.name.split()) for i, p in enumerate(series.points, start=1)]
    return metric_panels(stages, {f: [p.families.get(metric, {}).get(f) for p in series.points] for f in families},
                         path, f"{series.title}: {metric} by task family", full_scale=True)


def _e(value: Any) -> str:
    return html.escape("-" if value is None else str(value))


def _html_table(rows: list[dict[str, Any]], caption: str | None = None) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "\n".join("<tr>" + "".join(f"<td>{_e(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    cap = f"<caption>{_e(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>\n"


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sparring report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1300px; padding: 0 1em; color: #222; }}
img {{ max-width: 100%; border: 1px solid #ddd; }}
table {{ border-collapse: collapse; margin: 1em 0 2em; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; white-space: nowrap; }}
caption {{ caption-side: bottom; color: #666; text-align: left; padding-top: 0.3em; }}
</style></head>
<body>
<h1>sparring report</h1>
<p>Store: <code>{store}</code>. Every figure is a value with its 95% interval and sample size.</p>
{sections}
</body></html>
"""
