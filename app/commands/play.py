"""`sparring games` and `sparring play`: run games and log every turn."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import uuid
from typing import Annotated, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from app.commands.common import DbOption, FormatOption, err, fail, out, settings_or_exit, store_or_exit
from app.output import Format, emit
from app.wiring import SEAT_SPEC_HELP, PolicyFactory, SeatSpecError, parse_seat_specs


def games(fmt: FormatOption = Format.table) -> None:
    """List the games and their seats.

    Example: `sparring games`
    """
    from graphs.games import game_registry

    rows = [
        {"game": g.name, "seats": ", ".join(f"{s.name} ({s.kind})" for s in g.seats), "description": g.description}
        for g in game_registry().values()
    ]
    emit(rows, fmt, title="games")


def play(
    game: Annotated[str, typer.Argument(help="Game to play; `sparring games` lists them.")],
    episodes: Annotated[int, typer.Option("--episodes", "-n", min=1, help="Episodes to play.")] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes played at once.")] = 16,
    turns: Annotated[int, typer.Option(min=1, help="math-reflection: most actor answers (1 + refinements).")] = 3,
    rounds: Annotated[int, typer.Option(min=1, help="debate: rounds in which both debaters speak.")] = 2,
    stop_on_correct: Annotated[
        bool, typer.Option(help="math-reflection: stop when the critic says the answer is correct.")
    ] = True,
    tasks: Annotated[
        str, typer.Option(help="Task source: 'arithmetic', 'arithmetic:1-3', a GSM8K/MATH .jsonl file, or 'hf:ID'.")
    ] = "arithmetic",
    split: Annotated[
        str, typer.Option(help="train or heldout: the generator's split, or the label of a task file's tasks.")
    ] = "train",
    samples: Annotated[int, typer.Option(min=1, help="Episodes per task (several samples of one task).")] = 1,
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", help=SEAT_SPEC_HELP)] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature (0 = greedy).")] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling mass.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens a model turn may generate.")] = 160,
    timeout: Annotated[float | None, typer.Option(help="Seconds before an episode is marked timeout.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for task choice and sampling (default: settings).")] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Play GAME on N tasks, logging every turn, reward and judgment.

    Examples:

    * `sparring play math-reflection --episodes 32 --concurrency 16 --turns 3`
    * `sparring play debate -n 8 --rounds 2 --seat debater_b=scripted:stubborn`
    * `sparring play math-reflection --tasks ../shared/data/gsm8k_test.jsonl -n 100 --temperature 0`
    """
    from graphs.context import GameOptions
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.base import SamplingParams
    from graphs.tasks import load_tasks
    from graphs.tasks.base import TaskSourceError

    settings = settings_or_exit(database_url=db, seed=seed)
    try:
        spec = get_game(game)
        seat_specs = parse_seat_specs(spec, seat or [])
        options = GameOptions(turns=turns, rounds=rounds, stop_on_correct=stop_on_correct)
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        task_list = load_tasks(tasks, n=-(-episodes // samples), seed=settings.seed, split=split)
    except (UnknownGameError, SeatSpecError, TaskSourceError, ValueError) as exc:
        fail(str(exc))
    if not task_list:
        fail(f"task source {tasks!r} gave no tasks")
    task_list = [t for t in task_list for _ in range(samples)][:episodes]

    from graphs.runner import play as play_games
    from storage.recorder import Recorder, mark_orphans
    from storage.records import EpisodeStatus, RunRecord

    engine = store_or_exit(settings)
    orphans = mark_orphans(engine)
    if orphans:
        err.print(f"marked {orphans} episode(s) of ended processes as failed (interrupted)")
    run = RunRecord(
        id=uuid.uuid4().hex,
        game=spec.name,
        config={
            "episodes": episodes,
            "samples": samples,
            "concurrency": concurrency,
            "tasks": tasks,
            "split": split,
            "seats": seat_specs,
            "options": vars(options),
            "sampling": vars(sampling),
            "model": settings.model,
        },
        seed=settings.seed,
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    factory = PolicyFactory(settings, sampling, engine)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        progress = Progress(
            TextColumn(f"[bold]{spec.name}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ok {task.fields[ok]} failed {task.fields[bad]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=fmt != Format.table,
        )

        async def main():
            try:
                with err.status("loading models…"):
                    policies = await factory.policies(seat_specs)
                with progress:
                    bar = progress.add_task("play", total=len(task_list), ok=0, bad=0)
                    counts = {"ok": 0, "bad": 0}

                    def tick(summary) -> None:
                        counts["ok" if summary.status == EpisodeStatus.SUCCEEDED else "bad"] += 1
                        progress.update(bar, advance=1, **counts)

                    return await play_games(
                        spec,
                        task_list,
                        policies,
                        recorder,
                        concurrency=concurrency,
                        seed=settings.seed,
                        options=options,
                        run_id=run.id,
                        timeout_s=timeout,
                        on_episode=tick,
                    )
            finally:
                await factory.aclose()

        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            report = asyncio.run(main())
        except KeyboardInterrupt:
            recorder.abort_running(run.id, "interrupted by the user (Ctrl-C or SIGTERM)")
            recorder.finish_run(run.id, "interrupted", {})
            err.print("interrupted: finished episodes are kept, running ones are marked failed")
            raise typer.Exit(130) from None
        except Exception as exc:
            recorder.abort_running(run.id, f"the run stopped: {exc}")
            recorder.finish_run(run.id, "failed", {"error": str(exc)})
            fail(str(exc), code=1)
        finally:
            signal.signal(signal.SIGTERM, previous)
        recorder.flush()
        from evaluation.metrics import run_metrics

        metrics = run_metrics(engine, run.id)
        summary = {
            "run_id": run.id,
            "game": spec.name,
            "episodes": len(report.episodes),
            "succeeded": report.count(EpisodeStatus.SUCCEEDED),
            "failed": report.count(EpisodeStatus.FAILED),
            "timeout": report.count(EpisodeStatus.TIMEOUT),
            **metrics,
            "generated_tokens": report.completion_tokens,
            "tokens_per_s": round(report.tokens_per_s, 1),
            "wall_s": round(report.wall_s, 1),
        }
        recorder.finish_run(run.id, "finished", summary)
    _print_summary(summary, fmt)
    failures = [e for e in report.episodes if e.status != EpisodeStatus.SUCCEEDED]
    if failures and fmt == Format.table:
        first = failures[0]
        err.print(
            f"[yellow]{len(failures)} episode(s) did not succeed[/]; first: {first.episode_id[:12]} "
            f"at {first.error_stage}: {first.error}  (see `sparring episodes list --status failed`)"
        )


def _raise_interrupt(signum, frame) -> NoReturn:
    raise KeyboardInterrupt


def _print_summary(summary: dict, fmt: Format) -> None:
    if fmt == Format.table:
        rows = [{"metric": k, "value": v} for k, v in summary.items()]
        emit(rows, fmt, title="play summary", console=out)
    else:
        emit([summary], fmt)
