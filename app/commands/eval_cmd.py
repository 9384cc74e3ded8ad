"""`sparring eval`: measure a policy set on a task set, or compare two sets paired by task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress

from app import api
from app.api.evaluate import OPTION_DEFAULTS
from app.commands.common import ConcurrencyOption, DbOption, FormatOption, RayOption, err, fail, out
from app.commands.game_options import NONE_GIVEN, GameOptionValues, with_game_options
from app.interrupts import exit_when_stopped
from app.output import Format, emit
from app.progress import PhaseDisplay, phase_columns
from app.wiring import SEAT_SPEC_HELP

if TYPE_CHECKING:
    from evaluation.evaluator import EvaluationResult
    from graphs.metrics.stats import Estimate, PairedComparison
    from graphs.tasks.base import Task


@with_game_options(**OPTION_DEFAULTS)
def evaluate(
    game: Annotated[str, typer.Option(help="Game to play; `sparring games` lists them.")] = "math-reflection",
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", help=SEAT_SPEC_HELP)] = None,
    against: Annotated[
        list[str] | None,
        typer.Option(help="SEAT=SPEC of a second policy set, repeatable; seats not named keep --seat's. Both sets "
                          "play the same tasks and every metric is compared paired by task."),
    ] = None,
    tasks: Annotated[
        str | None,
        typer.Option(help="Task source (default: the game's own; math games: 'arithmetic', 'arithmetic:1-3', a "
                          "GSM8K/MATH .jsonl file, or 'hf:ID'; `sparring games` lists each game's).",
                     show_default=False),
    ] = None,
    split: Annotated[
        str | None, typer.Option(
            help="Play this split only: the generator's train, heldout, dev or unseen, or the label of a task "
                 "file's tasks (default: the source's evaluation splits; the generator: unseen, then heldout).",
            show_default=False)
    ] = None,
    n: Annotated[
        int, typer.Option("--n-tasks", "-n", min=1, help="Tasks of each set (a file: its first N, shuffled).")
    ] = 200,
    guard: Annotated[list[str] | None, typer.Option(
        "--guard", help="A further task source to play as a set of its own, repeatable (e.g. 'arithmetic:3-4' or "
                        "gsm8k_test.jsonl).", show_default=False)] = None,
    family: Annotated[list[str] | None, typer.Option(
        "--family", help="Of each set's -n tasks, play only this family's, repeatable (the generator's: add, sub, "
                         "mul, div, compare, add-sub, mul-add...).", show_default=False)] = None,
    game_options: GameOptionValues = NONE_GIVEN,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens per model turn.")] = 96,
    concurrency: ConcurrencyOption = 256,
    seed: Annotated[int | None, typer.Option(help="Seed for task choice and episodes (default: settings).")] = None,
    ray: RayOption = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Play a policy set greedily on task sets and print every metric with its 95% interval.

    The sets are the task source's evaluation splits (the arithmetic generator: problems in
    wordings no training episode has seen, then held-out problems in the training wordings), and
    any --guard sources; each set also gets the first metric by task family (operation and
    number of steps), so a family that falls is seen even when the total rises. Each set's
    evaluation is logged as a run of its own. Its figures are remembered under the exact
    policies (adapter versions, decoding), tasks, seed and game options: asking again reuses
    the stored run instead of playing it again. With --against, a second policy set plays
    the same tasks and each metric gets the paired difference (first set minus the --against
    set) with its 95% interval, the tasks each did better on, and McNemar's exact p. The
    in-process model plays so that no answer depends on what shares its batch
    (SPARRING_EVAL_DTYPE: float32, or with auto batch-invariant bfloat16 on a CPU where
    bfloat16 is measured faster).

    Examples:

    * `sparring eval --seat actor=model:actor@v2 -n 200`
    * `sparring eval --seat actor=model:actor@v2 --against actor=model:base`
    * `sparring eval --seat actor=model:actor@v2 --split unseen --family mul --family div`
    * `sparring eval --tasks examples/gsm8k_sample.jsonl -n 20 --seat critic=model:critic@v1`
    * `sparring eval --seat actor=scripted:calculator --seat critic=scripted:always-incorrect --turns 1`
    * `sparring eval --seat actor=model:actor@v2 -n 2000 --ray 10.0.0.5:6379`  (as many workers as the cluster holds)
    """
    with exit_when_stopped("interrupted: the unfinished evaluation run is marked interrupted and will not be reused"), \
            PhaseDisplay(err, Progress(*phase_columns(), console=err, transient=True)) as bars:
        try:
            report = api.evaluate(
                game, seats=seat or [], against=against, tasks=tasks, split=split, n=n, guards=guard or (),
                families=family or (), options=game_options.given, max_new_tokens=max_new_tokens,
                concurrency=concurrency, seed=seed, ray=ray, database_url=db, progress=bars,
            )
        except api.InputError as exc:
            fail(str(exc))
    records: list[dict[str, Any]] = []
    for found in report.sets:
        for result in (found.result, found.against):
            if result is not None and result.failed:
                err.print(f"[yellow]{result.failed} of {result.episodes} episode(s) failed[/] in run "
                          f"{result.run_id[:12]}; the figures count the others (see `sparring episodes list --run "
                          f"{result.run_id} --status failed`); this run will not be reused")
        title = f"{report.game}: {len(found.tasks)} {_set_title(found.name)} tasks, greedy, seed {report.seed}"
        if found.against is None:
            records += _print_one(found.result, report.seats, fmt, title, found.name, found.tasks)
        else:
            records += _print_paired(found.result, found.against, report.seats, report.against, fmt, title,
                                     found.name, found.tasks)
    if fmt != Format.table:
        emit(records, fmt)


def _set_title(name: str) -> str:
    from graphs.tasks import SPLIT_TITLES

    return SPLIT_TITLES.get(name, name)


def _percent(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}%"


def _interval(estimate: Estimate, signed: bool = False) -> str:
    if estimate.low is None or estimate.high is None:
        return "-"
    return f"[{_percent(estimate.low, signed).rstrip('%')}, {_percent(estimate.high, signed).rstrip('%')}]"


def _print_one(result: EvaluationResult, specs: dict[str, str], fmt: Format, title: str, name: str,
               tasks: list[Task]) -> list[dict[str, Any]]:
    """Print one set's figures as tables; return its json records (every metric, then the first
    by family when the set has several)."""
    from evaluation.families import by_family

    first = next(iter(result.metrics), None)
    families = by_family(result.per_task.get(first, {}), tasks) if first else {}
    families = families if len(families) > 1 else {}
    if fmt != Format.table:
        common = {"set": name, "run_id": result.run_id, "reused": result.reused}
        return ([{"metric": metric, "family": None, **e.to_dict(), **common} for metric, e in result.metrics.items()]
                + [{"metric": first, "family": family, **e.to_dict(), **common} for family, e in families.items()])
    rows = [{"metric": metric, "value": _percent(e.value), "95% interval": _interval(e), "n": e.n}
            for metric, e in result.metrics.items()]
    emit(rows, fmt, title=title, caption=_caption(result, specs), console=out)
    if families:
        emit([{"family": family, "value": _percent(e.value), "95% interval": _interval(e), "n": e.n}
              for family, e in families.items()], fmt, title=f"{first} by task family ({name})", console=out)
    return []


def _caption(result: EvaluationResult, specs: dict[str, str]) -> str:
    reused = ", reused" if result.reused else ""
    return f"{' '.join(f'{s}={p}' for s, p in specs.items())} (run {result.run_id[:12]}{reused})"


def _print_paired(result: EvaluationResult, baseline: EvaluationResult, specs: dict[str, str],
                  against: dict[str, str], fmt: Format, title: str, name: str,
                  tasks: list[Task]) -> list[dict[str, Any]]:
    """Print one set's paired comparison as tables; return its json records (every metric, then
    the first by family when the set has several)."""
    from evaluation.families import paired_by_family
    from graphs.metrics.stats import paired

    comparisons: dict[str, PairedComparison | None] = {
        metric: paired(result.per_task[metric], baseline.per_task[metric])
        if result.per_task.get(metric) and baseline.per_task.get(metric) and
        set(result.per_task[metric]) & set(baseline.per_task[metric]) else None
        for metric in result.metrics
    }
    first = next(iter(result.metrics), None)
    families = paired_by_family(result.per_task.get(first, {}), baseline.per_task.get(first, {}), tasks) \
        if first else {}
    families = families if len(families) > 1 else {}
    if fmt != Format.table:
        return ([{**_paired_record(metric, result, baseline, comparisons[metric]), "set": name, "family": None}
                 for metric in result.metrics]
                + [{**_family_record(first, c), "set": name, "family": family,
                    "run_id": result.run_id, "against_run_id": baseline.run_id} for family, c in families.items()])
    rows = []
    for metric, estimate in result.metrics.items():
        other, comparison = baseline.metrics.get(metric), comparisons[metric]
        rows.append({
            "metric": metric, "value": _percent(estimate.value),
            "against": _percent(other.value if other else None), **_diff_cells(comparison),
        })
    changed = {s: p for s, p in specs.items() if against.get(s) != p}
    caption = (f"{_caption(result, changed)} against {_caption(baseline, {s: against[s] for s in changed})}; "
               "diff = value - against, paired by task")
    emit(rows, fmt, title=title, caption=caption, console=out)
    if families:
        from evaluation.families import worse_beyond_noise

        emit([{"family": family, "value": _percent(c.candidate.value), "against": _percent(c.baseline.value),
               **_diff_cells(c), "n": c.difference.n, "worse": "beyond noise" if worse_beyond_noise(c) else ""}
              for family, c in families.items()], fmt, title=f"{first} by task family ({name})", console=out,
             caption="worse beyond noise: the paired interval lies below 0 and p < 0.05")
    return []


def _diff_cells(comparison: PairedComparison | None) -> dict[str, Any]:
    return {
        "diff (pts) [95%]": "-" if comparison is None else
        f"{_percent(comparison.difference.value, True)} {_interval(comparison.difference, True)}",
        "p": None if comparison is None else comparison.p_text(2),
    }


def _family_record(metric: str, comparison: PairedComparison) -> dict[str, Any]:
    return {"metric": metric, "value": comparison.candidate.to_dict(), "against": comparison.baseline.to_dict(),
            "difference": comparison.difference.to_dict(), "better": comparison.better,
            "worse": comparison.worse, "p_value": comparison.p_value}


def _paired_record(name: str, result: EvaluationResult, baseline: EvaluationResult,
                   comparison: PairedComparison | None) -> dict[str, Any]:
    missing = {"value": None, "n": 0, "low": None, "high": None}
    return {
        "metric": name, "value": result.metrics[name].to_dict(),
        "against": baseline.metrics[name].to_dict() if name in baseline.metrics else missing,
        "difference": comparison.difference.to_dict() if comparison else missing,
        "better": comparison.better if comparison else None, "worse": comparison.worse if comparison else None,
        "p_value": comparison.p_value if comparison else None,
        "run_id": result.run_id, "against_run_id": baseline.run_id,
    }
