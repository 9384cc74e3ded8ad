"""`sparring games` and `sparring play`: run games and log every turn."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from app.commands.common import (
    DbOption, FormatOption, RayOption, clean_up_stale_work, err, fail, out, ray_cluster_or_exit, settings_or_exit,
    store_or_exit,
)
from app.commands.game_options import NONE_GIVEN, GameOptionValues, with_game_options
from app.interrupts import exit_when_stopped
from app.output import Format, emit
from app.progress import progress as progress_display
from app.wiring import SEAT_SPEC_HELP, SeatSpecError, check_versions, parse_seat_specs

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.playing import PlayJob
    from app.ray_workers import Cluster
    from app.settings import Settings
    from graphs.tasks.base import Task


def games(fmt: FormatOption = Format.table) -> None:
    """List the games, their seats and options (json: also their gate metrics and rewards).

    Example: `sparring games`
    """
    from graphs.games import game_registry

    from graphs.options import cli_flag, option_fields

    rows = [
        {"game": g.name, "seats": ", ".join(f"{s.name} ({s.kind})" for s in g.seats),
         "options": ", ".join(cli_flag(name) for name in option_fields(g.options)) or "-",
         "description": g.description, "tasks": g.tasks.default, "task_specs": g.tasks.accepted,
         "gate_metrics": {seat: gate.name for seat, gate in g.gate_metrics.items()}, "rewards": dict(g.rewards)}
        for g in game_registry().values()
    ]
    emit(rows, fmt, columns=["game", "seats", "description", "options", "tasks"], title="games")


@with_game_options()
def play(
    game: Annotated[str | None, typer.Argument(
        metavar="GAME", help="Game to play; `sparring games` lists them, and `sparring play GAME --help` shows its "
                             "seats, bots, options and metrics.", show_default=False)] = None,
    game_option: Annotated[str | None, typer.Option(
        "--game", help="The game, named as eval, retrain and deploy name it (instead of GAME).",
        show_default=False)] = None,
    episodes: Annotated[int, typer.Option("--episodes", "-n", min=1, help="Episodes to play.")] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes played at once.")] = 16,
    game_options: GameOptionValues = NONE_GIVEN,
    tasks: Annotated[
        str | None,
        typer.Option(help="Task source (default: the game's own; math games: 'arithmetic', 'arithmetic:1-3', a "
                          "GSM8K/MATH .jsonl file, or 'hf:ID'; `sparring games` lists each game's).",
                     show_default=False),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            help="Split the episodes are logged under; dataset builds read 'train' only. arithmetic: 'train' "
            "(default) or 'heldout' problems. A task file: 'eval' by default (evaluation data, never trained "
            "on); pass 'train' to train on its episodes.",
            show_default=False,
        ),
    ] = None,
    samples: Annotated[int, typer.Option(min=1, help="Episodes per task (several samples of one task).")] = 1,
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", metavar="SEAT=SPEC", help=SEAT_SPEC_HELP)] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature (0 = greedy).")] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling mass.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens a model turn may generate.")] = 160,
    timeout: Annotated[
        float | None,
        typer.Option(help="Seconds (> 0) before an episode is marked timeout; default none.", show_default=False),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for task choice and sampling (default: settings).")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            help="Processes that play the episodes, each with its own models and --concurrency, e.g. -w 4; "
            "episode i keeps task i and seed SEED+i whatever the number. Default 1; with --ray, as many as "
            "the cluster holds.",
            show_default=False,
        ),
    ] = None,
    ray: RayOption = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Play GAME on N tasks, logging every turn, reward and judgment.

    Examples:

    * `sparring play math-reflection --episodes 32 --concurrency 16 --turns 3`
    * `sparring play debate -n 8 --rounds 2 --seat debater_b=scripted:stubborn`
    * `sparring play math-reflection --tasks examples/gsm8k_sample.jsonl -n 20 --temperature 0`
    * `sparring play math-reflection -n 1024 -c 32 --workers 4`  (4 processes, one store)
    * `sparring play math-reflection -n 4096 --ray 10.0.0.5:6379 --db postgresql+psycopg://me@10.0.0.5/sparring`
    * `sparring play negotiation --help`  (the game's seats, bots, options and metrics)
    * `sparring play --game debate -n 8`  (the game named as eval, retrain and deploy name it)
    """
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.base import SamplingParams
    from graphs.tasks.base import TaskSourceError

    if timeout is not None and not timeout > 0:
        fail(f"--timeout must be a positive number of seconds, got {timeout:g}; leave it out for no time limit")
    if game is not None and game_option is not None and game != game_option:
        fail(f"GAME {game!r} and --game {game_option!r} name two games; name one, either way")
    game = game or game_option
    if game is None:
        fail("name the game to play: `sparring play GAME` or `sparring play --game GAME` (`sparring games` lists "
             "them)")
    settings = settings_or_exit(database_url=db, seed=seed)
    try:
        spec = get_game(game)
        options = game_options.make(spec)
        seat_specs = parse_seat_specs(spec, seat or [], options=options)
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        tasks = tasks or spec.tasks.default
        split = split or spec.tasks.default_split(tasks)
        task_list = spec.tasks.load(tasks, n=-(-episodes // samples), seed=settings.seed, split=split)
    except (UnknownGameError, SeatSpecError, TaskSourceError, ValueError) as exc:
        fail(str(exc))
    if not task_list:
        fail(f"task source {tasks!r} gave no tasks")
    task_list = [t for t in task_list for _ in range(samples)][:episodes]
    if len(task_list) < episodes:
        per_task = f" ({samples} per task)" if samples > 1 else ""
        err.print(f"[yellow]{escape(tasks)} has only {len(task_list) // samples} task(s): playing {len(task_list)} "
                  f"episode(s){per_task}, not the {episodes} asked for (-n)[/]", highlight=False)

    from app.playing import PlayJob
    from app.seat_draws import check_draws

    engine = store_or_exit(settings)
    try:
        check_versions(engine, seat_specs)  # a version the registry lacks: refused before a run is opened
        check_draws(engine, spec, seat_specs)  # a pool naming versions the registry lacks: before anything plays
    except SeatSpecError as exc:
        fail(str(exc))
    clean_up_stale_work(engine)
    cluster = ray_cluster_or_exit(settings, ray)
    job = PlayJob(
        settings=settings,
        game=spec.name,
        seats=seat_specs,
        options=options,
        sampling=sampling,
        concurrency=concurrency,
        timeout_s=timeout,
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
    )
    bar = _Bar(spec.name, len(task_list), transient=fmt != Format.table)
    with exit_when_stopped("interrupted: finished episodes are kept, running ones are marked failed"):
        if cluster is not None:
            with cluster:
                summary = _play_on_ray(job, task_list, cluster, workers or cluster.capacity, engine, bar)
        elif workers is None or workers == 1:
            summary = _play_here(job, task_list, engine, bar)
        else:
            summary = _play_in_workers(job, task_list, workers, engine, bar)
    _print_summary(summary, fmt)
    if summary.get("unplayed") or summary.get("worker_errors"):
        fail(
            f"{'; '.join(summary.get('worker_errors', []) + summary.get('workers_lost', []))}. "
            f"{summary.get('unplayed', 0)} episode(s) were not played (see `sparring episodes list --run "
            f"{summary['run_id']} --status failed`).",
            code=1,
        )
    if summary.get("workers_lost"):
        err.print(f"[yellow]{'; '.join(summary['workers_lost'])}[/]. The unfinished episodes were played again "
                  f"({summary['replayed']} replayed); the cut ones are marked failed", highlight=False)
    if summary.get("workers_died"):
        fail(
            f"{'; '.join(summary['workers_died'])}. The others finished. What a dead worker finished is kept, its "
            "running episodes are marked failed and the episodes it had not started were not played "
            f"(see `sparring episodes list --run {summary['run_id']} --status failed`).",
            code=1,
        )
    failure = _first_failure(engine, summary["run_id"])
    if failure is None:
        return
    bad = summary["episodes"] - summary["succeeded"]
    first = f"{failure.text}{_hint(failure.seat, seat_specs.get(failure.seat or ''), settings)}"
    see = f"see `sparring episodes list --run {summary['run_id']} --status failed`"
    if summary["succeeded"] == 0:
        fail(f"no episode succeeded ({bad} of {summary['episodes']} did not); the first failure: {first} ({see})", 1)
    if fmt == Format.table:
        err.print(f"[yellow]{bad} episode(s) did not succeed[/]; first: {first}  ({see})")


class _Bar:
    """One progress bar for all the episodes of the command, whichever process plays them."""

    def __init__(self, game: str, total: int, *, transient: bool) -> None:
        self.counts = {"ok": 0, "bad": 0}
        self.progress = progress_display(
            TextColumn(f"[bold]{game}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ok {task.fields[ok]} failed {task.fields[bad]}{task.fields[note]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=transient,
        )
        self.task = self.progress.add_task("play", total=total, ok=0, bad=0, note="")

    def tick(self, succeeded: bool) -> None:
        self.counts["ok" if succeeded else "bad"] += 1
        self.progress.update(self.task, advance=1, **self.counts)

    def show(self, ok: int, bad: int) -> None:
        """Set the counts (`--ray` reads them from the store)."""
        self.counts.update(ok=ok, bad=bad)
        self.progress.update(self.task, completed=ok + bad, **self.counts)

    def note(self, text: str) -> None:
        self.progress.update(self.task, note=f"  {text}")


def _play_here(job: PlayJob, task_list: Sequence[Task], engine: Engine, bar: _Bar) -> dict[str, Any]:
    """``--workers 1``: play every episode in this process. Ctrl-C or SIGTERM: KeyboardInterrupt
    once the running episodes are marked failed and the run interrupted (``play_share``)."""
    from app.playing import play_share, summarize
    from storage.recorder import Recorder

    run = job.run_record()
    loading = err.status("loading models…")
    loading.start()

    def loaded() -> None:
        loading.stop()
        bar.progress.start()

    with Recorder(engine) as recorder:
        try:
            report = play_share(
                job, task_list, first_index=0, engine=engine, recorder=recorder, run=run,
                on_loaded=loaded, on_episode=lambda e: bar.tick(e.status == "succeeded"),
            )
        except Exception as exc:
            fail(str(exc), code=1)
        finally:
            loading.stop()
            bar.progress.stop()
        recorder.flush()
        summary = summarize(engine, run.id, job.game, completion_tokens=report.completion_tokens, wall_s=report.wall_s)
        recorder.finish_run(run.id, "finished", summary)
    return summary


def _play_in_workers(
    job: PlayJob, task_list: Sequence[Task], workers: int, engine: Engine, bar: _Bar
) -> dict[str, Any]:
    """``--workers N``: N processes play shares of the episodes; this one shows their progress
    and writes the command's run (each worker's run names it as its parent). Ctrl-C or SIGTERM:
    the signal's KeyboardInterrupt once the workers have stopped and every run is interrupted."""
    from app.playing import summarize
    from app.workers import play_in_workers
    from storage.recorder import Recorder

    workers = min(workers, len(task_list))
    run = job.run_record(workers=workers)
    ready = 0

    def on_ready() -> None:
        nonlocal ready
        ready += 1
        bar.note(f"workers ready {ready}/{workers}")

    started = time.perf_counter()
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        bar.note(f"starting {workers} workers…")
        try:
            with bar.progress:
                outcome = play_in_workers(
                    job, task_list, workers=workers, engine=engine, parent_run_id=run.id,
                    on_ready=on_ready, on_episode=lambda ok, _tokens: bar.tick(ok),
                )
        except Exception as exc:
            recorder.finish_run(run.id, "failed", {"error": str(exc)})
            fail(f"could not run the workers: {exc}", code=1)
        wall_s = time.perf_counter() - started
        summary = summarize(engine, run.id, job.game, completion_tokens=outcome.completion_tokens, wall_s=wall_s)
        summary["workers"] = workers
        if outcome.interrupted is not None:
            recorder.finish_run(run.id, "interrupted", summary)
            raise outcome.interrupted
        if outcome.died:
            summary["workers_died"] = outcome.died
        recorder.finish_run(run.id, "failed" if outcome.died else "finished", summary)
    return summary


def _play_on_ray(
    job: PlayJob, task_list: Sequence[Task], cluster: Cluster, workers: int, engine: Engine, bar: _Bar
) -> dict[str, Any]:
    """``--ray``: workers on the cluster play the episodes (``app.ray_workers``); this process
    writes the command's run and shows the progress the store shows. Ctrl-C or SIGTERM: the
    signal's KeyboardInterrupt once the workers are killed and every run is interrupted."""
    from app.interrupts import run_interruptible
    from app.playing import summarize
    from app.ray_workers import play_on_ray
    from storage.recorder import Recorder

    workers = min(workers, len(task_list))
    run = job.run_record(workers=workers, ray=cluster.address)

    def show(played: dict[int, str]) -> None:
        ok = sum(status == "succeeded" for status in played.values())
        bar.show(ok, len(played) - ok)

    started = time.perf_counter()
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        bar.note(f"{workers} ray workers")
        try:
            with bar.progress:
                outcome = run_interruptible(play_on_ray(
                    job, task_list, cluster=cluster, workers=workers, engine=engine, parent_run_id=run.id,
                    on_progress=show,
                ))
        except KeyboardInterrupt:
            recorder.finish_run(run.id, "interrupted", {})
            raise
        except Exception as exc:
            recorder.finish_run(run.id, "failed", {"error": str(exc)})
            fail(f"could not play on the Ray cluster: {exc}", code=1)
        summary = summarize(engine, run.id, job.game, completion_tokens=outcome.completion_tokens,
                            wall_s=time.perf_counter() - started)
        summary.update(workers=workers, replayed=outcome.replayed, unplayed=outcome.unplayed)
        if outcome.lost:
            summary["workers_lost"] = outcome.lost
        if outcome.errors:
            summary["worker_errors"] = outcome.errors
        recorder.finish_run(run.id, "failed" if outcome.unplayed or outcome.errors else "finished", summary)
    return summary


@dataclass(frozen=True)
class _Failure:
    text: str
    """ID at STAGE: ERROR"""
    seat: str | None
    """the seat whose turn failed, when a turn did"""


def _first_failure(engine: Engine, run_id: str) -> _Failure | None:
    """The run's first episode that failed or timed out."""
    from storage.queries import EpisodeFilter, get_episode, list_episodes

    for status in ("failed", "timeout"):
        page = list_episodes(engine, EpisodeFilter(run_id=run_id, status=status), sort="started_at", limit=1)
        if page.items:
            episode = get_episode(engine, page.items[0]["id"])
            stage = episode["error_stage"] or ""
            seat, turn, _ = stage.rpartition(" turn ")  # stages of turns read "SEAT turn N"
            return _Failure(f"{episode['id'][:12]} at {stage or '?'}: {episode['error']}", seat if turn else None)
    return None


def _hint(seat: str | None, spec: str | None, settings: Settings) -> str:
    """What to check when a seat's turn failed, for seats whose error cannot know it: an
    ``openai:`` seat calls the hosted API of the settings, which no vLLM server fixes."""
    if not spec or not spec.startswith("openai:"):
        return ""
    key = "set" if settings.openai_api_key or os.environ.get("OPENAI_API_KEY") else "not set"
    return (
        f". The {seat} seat plays {spec}, a model of the OpenAI-compatible API at SPARRING_OPENAI_BASE_URL "
        f"({settings.openai_base_url}): check that URL and the key, SPARRING_OPENAI_API_KEY or OPENAI_API_KEY "
        f"({key}); `sparring vllm` serves only 'model' seats"
    )


def _print_summary(summary: dict[str, Any], fmt: Format) -> None:
    if fmt == Format.table:
        rows = [{"metric": k, "value": v} for k, v in summary.items()]
        emit(rows, fmt, title="play summary", console=out)
    else:
        emit([summary], fmt)
