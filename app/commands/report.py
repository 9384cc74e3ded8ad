"""`sparring report`: what a store has learned, as plots and tables in one HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.commands.common import DbOption, FormatOption, err, out, settings_or_exit, store_or_exit
from app.commands.jobs import job_summary
from app.commands.settings_cmd import mask_url
from app.output import Format, emit

if TYPE_CHECKING:
    from evaluation.report import PageSection
    from training.jobs import JobRecord

NOTHING_CODE = 1
JOBS_SHOWN = 20
"""The newest training jobs the page plots (each its own PNG)."""


def report(
    out_dir: Annotated[
        Path, typer.Option("--out", help="Folder for the page (index.html) and its PNGs; created if missing.")
    ] = Path("sparring-report"),
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Plot every metric per adapter version and retrain round, with 95% intervals, into one HTML page.

    Reads the store's finished evaluations (from `sparring retrain`, `sparring deploy` and
    `sparring eval`): those of the same game on the same tasks and settings are one series,
    drawn as one PNG with a panel per metric, a point per policy set (x axis, in the order
    first measured) and its 95% interval as error bars. The page also lists every retrain
    round: each role's outcome and the gate's paired change, the ratings ladder when the
    store has rated games (`sparring ratings`), and the newest training jobs, each with a plot
    of what tells whether it learns, per step (loss; DPO's reward margins and accuracies;
    GRPO's reward, its spread and the share of groups without spread; KL, clip fraction,
    entropy: what the trainer logged). The console gets each series'
    first and latest figures (`--format json|jsonl`: every figure, one row per policy set and
    metric). Exits 1, writing nothing, when the store has no evaluation, round, rated game or
    training job yet.

    Examples:

    * `sparring report`   (writes ./sparring-report/index.html)
    * `sparring report --out /tmp/run3 --db postgresql+psycopg://me@db:5432/sparring`
    * `sparring report --format jsonl | jq -c 'select(.metric == "pass@turn-1")'`
    """
    from evaluation.report import read_report, write_page
    from training.jobs import list_jobs

    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    found = read_report(engine)
    jobs = list_jobs(engine, limit=JOBS_SHOWN)
    if found.empty and not jobs:
        err.print(
            "nothing to plot yet: this store has no finished evaluation, retrain round, rated game or training job "
            f"({mask_url(settings.database_url)}). Make some with `sparring retrain` (play, train, gate and "
            "evaluate before and after), or measure a policy set with `sparring eval`.",
            highlight=False,
        )
        raise typer.Exit(NOTHING_CODE)
    more = [_training_section(jobs, out_dir)] if jobs else []
    page = write_page(found, out_dir, store=mask_url(settings.database_url), more=more)
    if fmt != Format.table:
        emit([record for series in found.series for record in series.records()], fmt)
    else:
        for series in found.series:
            last = len(series.points) - 1
            shown = list(range(last + 1)) if last < 2 else [0, last]
            note = f" (first and latest of {last + 1} policy sets)" if len(shown) <= last else ""
            emit(series.table(shown), fmt, title=series.title + note, caption="\n".join(series.legend(shown)),
                 console=out)
        if found.rounds:
            emit(found.rounds, fmt, columns=["round", "role", "status", "rows", "candidate", "change"],
                 title="retrain rounds", console=out)
        if jobs:
            emit([_job_row(job) for job in jobs], fmt, columns=["job", "kind", "role", "status", "adapter", "steps",
                                                                "loss"], title="training jobs", console=out)
    plots = len(found.series) + bool(found.ladders) + sum(len(section.images) for section in more)
    err.print(f"wrote {page} ({plots} plot(s) beside it)", highlight=False)


def _job_row(job: JobRecord) -> dict[str, Any]:
    summary = job_summary(job)
    loss, started = summary["loss"], summary["started_at"]
    return {**{key: summary[key] for key in ("job", "kind", "role", "status", "adapter", "steps")},
            "loss": None if loss is None else round(loss, 4),
            "started": started.strftime("%Y-%m-%d %H:%M") if started else None}


def _training_section(jobs: list[JobRecord], out_dir: Path) -> PageSection:
    """The training jobs, newest first, each with a plot of what tells whether it learned."""
    from evaluation.report import PageSection
    from training.history import learning_signals, plot

    images = []
    for job in jobs:
        signals = learning_signals(job.history)
        if signals:
            png = plot(job.history, signals, out_dir / f"job-{job.id}.png",
                       title=f"job {job.id}: {job.kind} {job.role}" + (f" -> {job.adapter}" if job.adapter else ""))
            images.append((png.name, f"job {job.id}: {', '.join(signals)} per step"))
    caption = (f"the newest {JOBS_SHOWN} jobs; `sparring jobs list` lists every one" if len(jobs) == JOBS_SHOWN
               else "`sparring jobs show JOB` prints a job's every logged step")
    return PageSection("Training jobs", images, [([_job_row(job) for job in jobs], caption)])
