"""`sparring report`: what a store has learned, as plots and tables in one HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.commands.common import DbOption, FormatOption, err, out, settings_or_exit, store_or_exit
from app.commands.settings_cmd import mask_url
from app.output import Format, emit

NOTHING_CODE = 1


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
    round: each role's outcome and the gate's paired change, and the ratings ladder when the
    store has rated games (`sparring ratings`). The console gets each series'
    first and latest figures (`--format json|jsonl`: every figure, one row per policy set and
    metric). Exits 1, writing nothing, when the store has no evaluation, round or rated game yet.

    Examples:

    * `sparring report`   (writes ./sparring-report/index.html)
    * `sparring report --out /tmp/run3 --db postgresql+psycopg://me@db:5432/sparring`
    * `sparring report --format jsonl | jq -c 'select(.metric == "pass@turn-1")'`
    """
    from evaluation.report import read_report, write_page

    settings = settings_or_exit(database_url=db)
    found = read_report(store_or_exit(settings))
    if found.empty:
        err.print(
            "nothing to plot yet: this store has no finished evaluation, retrain round or rated game "
            f"({mask_url(settings.database_url)}). Make some with `sparring retrain` (play, train, gate and "
            "evaluate before and after), or measure a policy set with `sparring eval`.",
            highlight=False,
        )
        raise typer.Exit(NOTHING_CODE)
    page = write_page(found, out_dir, store=mask_url(settings.database_url))
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
    err.print(f"wrote {page} ({len(found.series) + bool(found.ladders)} plot(s) beside it)", highlight=False)
