"""`sparring runs list|show`: the runs in the store, one per command that played episodes
(`play`, and each evaluation of `eval`, `deploy` and `retrain`; a worker's run names its parent)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from app.commands.common import DbOption, FormatOption, engine_or_exit, fail, out
from app.output import Format, dumps, emit

runs_app = typer.Typer(help="Runs: one per command that played episodes, with its settings and summary.",
                       no_args_is_help=True)
RUN_STATUSES = ("running", "finished", "interrupted", "failed")


def _line(run: dict[str, Any]) -> dict[str, Any]:
    summary = run.get("summary") or {}
    return {
        "run": run["id"], "game": run["game"], "status": run["status"],
        "episodes": summary.get("episodes"), "succeeded": summary.get("succeeded"),
        "started_at": run["started_at"], "finished_at": run["finished_at"], "parent": run["parent_id"],
        "host": run["host"], "pid": run["pid"], "seed": run["seed"], "config": run["config"], "summary": run["summary"],
    }


def _value(value: Any) -> Any:
    """A table cell: a nested value as JSON."""
    return dumps(value) if isinstance(value, dict | list) else value


@runs_app.command("list")
def runs_list(
    game: Annotated[str | None, typer.Option(help="Only this game's runs.", show_default=False)] = None,
    status: Annotated[str | None, typer.Option(help="running, finished, interrupted or failed.",
                                               show_default=False)] = None,
    limit: Annotated[int, typer.Option(min=1, help="Newest runs shown.")] = 20,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List runs, newest first: game, status, episodes played and succeeded, when.

    Examples:

    * `sparring runs list`
    * `sparring runs list --game debate --status interrupted --format json`
    """
    if status is not None and status not in RUN_STATUSES:
        fail(f"--status {status!r} is not a run status; use one of {', '.join(RUN_STATUSES)}")
    from storage.viewer_rows import list_runs

    rows = [_line(run) for run in list_runs(engine_or_exit(db), limit, game=game, status=status)]
    emit(rows, fmt, title="runs",
         columns=["run", "game", "status", "episodes", "succeeded", "started_at", "finished_at", "parent"])


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="A run id, or its first characters (`sparring runs "
                                          "list`).")],
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Show one run: its settings (game, seats, options, sampling), where it ran, its episodes
    counted by status and its summary (an evaluation's metrics).

    Examples:

    * `sparring runs show 3f2a`
    * `sparring runs show 3f2a --format json`
    * `sparring episodes list --run 3f2a` (its episodes)
    """
    from app.server.reads import get_run
    from storage.queries import resolve_run_id

    engine = engine_or_exit(db)
    try:
        run = get_run(engine, resolve_run_id(engine, run_id))
    except KeyError as exc:
        fail(f"{exc.args[0]}; `sparring runs list` lists the runs")
    record = {**_line(run), "episodes_by_status": run["episodes_by_status"]}
    if fmt != Format.table:
        emit([record], fmt)
        return
    rows = [{"field": key, "value": _value(value)} for key, value in record.items() if key not in ("config", "summary")]
    for part in ("config", "summary"):
        rows += [{"field": f"{part}.{key}", "value": _value(value)} for key, value in (run[part] or {}).items()]
    emit(rows, fmt, title=f"run {run['id']}", console=out)
