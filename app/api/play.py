"""Play a game: episodes logged to the store, in this process, in worker processes or on Ray."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from app.api.cluster import ray_cluster
from app.api.errors import InputError, RunError
from app.api.store import open_for_work, settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.playing import PlayJob
    from app.ray_workers import Cluster
    from graphs.tasks.base import Task


class PlayProgress(Protocol):
    """What a long `play` tells as it goes (the CLI draws a progress bar from it)."""

    def planned(self, episodes: int) -> None:
        """The number of episodes that will be played (fewer than asked when the tasks run out)."""

    def warn(self, text: str) -> None:
        """Something the user should read: a shortfall of tasks, stale work marked failed."""

    def note(self, text: str) -> None:
        """How the work goes, in a few words: workers starting, workers ready."""

    def loaded(self) -> None:
        """The models are loaded (in this process) and the first episodes start."""

    def episode(self, succeeded: bool) -> None:
        """One more episode ended (played here or by a worker process)."""

    def counts(self, succeeded: int, failed: int) -> None:
        """The episodes ended so far, as the store shows them (``ray``)."""


class _Silent:
    def planned(self, episodes: int) -> None:
        pass

    def warn(self, text: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def loaded(self) -> None:
        pass

    def episode(self, succeeded: bool) -> None:
        pass

    def counts(self, succeeded: int, failed: int) -> None:
        pass


@dataclass(frozen=True)
class PlayResult:
    """A finished `play`: its run in the store and what happened to its episodes."""

    run_id: str
    game: str
    seats: dict[str, str]
    """each seat's policy spec, as played"""
    episodes: int
    succeeded: int
    summary: dict[str, Any]
    """the run's summary as stored (status counts, metrics, tokens, wall time, workers)"""
    first_failure: str | None = None
    """"EPISODE at STAGE: ERROR" of the first episode that failed or timed out"""
    failed_seat: str | None = None
    """the seat whose turn failed in that episode, when a turn did"""
    workers_lost: list[str] = field(default_factory=list)
    """workers that died whose unfinished episodes were played again (``ray``)"""
    workers_died: list[str] = field(default_factory=list)
    """worker processes that died (``workers``): what they had not started was not played"""
    worker_errors: list[str] = field(default_factory=list)
    unplayed: int = 0
    """episodes no worker could play (``ray``)"""


def play(
    game: str,
    *,
    episodes: int = 16,
    seats: Mapping[str, str] | Sequence[str] | None = None,
    tasks: str | None = None,
    split: str | None = None,
    samples: int = 1,
    options: Mapping[str, Any] | None = None,
    temperature: float = 0.7,
    top_p: float = 1.0,
    max_new_tokens: int = 160,
    concurrency: int = 16,
    timeout_s: float | None = None,
    seed: int | None = None,
    workers: int | None = None,
    ray: str | None = None,
    database_url: str | None = None,
    progress: PlayProgress | None = None,
) -> PlayResult:
    """Play ``episodes`` episodes of ``game`` and log every turn, reward and judgment.

    ``seats`` maps a seat to its policy spec (``model``, ``model:actor@v2``,
    ``scripted:always-correct``, ``openai:MODEL``, a pool), or lists ``SEAT=SPEC`` as ``--seat``
    gives them; seats left out get SPARRING_SEATS, else the game's defaults. ``tasks`` is a task
    spec (default: the game's own), ``options`` the game's options by field name (``{"turns": 3}``).
    Episode ``i`` plays task ``i`` with seed ``seed + i`` whether one process plays them,
    ``workers`` processes or the Ray cluster at ``ray`` (into a PostgreSQL store). Ctrl-C:
    KeyboardInterrupt once the running episodes are marked failed; finished ones are kept.
    """
    from app.playing import PlayJob
    from app.seat_pools.resolve import check_draws
    from app.wiring import SeatSpecError, check_versions, parse_seat_specs, seat_args
    from graphs.policies.base import SamplingParams
    from graphs.registry import UnknownGameError, get_game
    from graphs.tasks.base import TaskSourceError

    progress = progress or _Silent()
    if timeout_s is not None and not timeout_s > 0:
        raise InputError(f"timeout_s must be a positive number of seconds, got {timeout_s:g}; leave it out for none")
    chosen = settings(database_url=database_url, seed=seed)
    try:
        spec = get_game(game)
        game_options = spec.make_options(dict(options or {}))
        seat_specs = parse_seat_specs(spec, seat_args(seats), options=game_options)
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        tasks = tasks or spec.tasks.default
        split = split or spec.tasks.default_split(tasks)
        task_list = spec.tasks.load(tasks, n=-(-episodes // samples), seed=chosen.seed, split=split)
    except (UnknownGameError, SeatSpecError, TaskSourceError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    if not task_list:
        raise InputError(f"task source {tasks!r} gave no tasks")
    task_list = [t for t in task_list for _ in range(samples)][:episodes]
    if len(task_list) < episodes:
        per_task = f" ({samples} per task)" if samples > 1 else ""
        progress.warn(f"{tasks} has only {len(task_list) // samples} task(s): playing {len(task_list)} "
                      f"episode(s){per_task}, not the {episodes} asked for")
    progress.planned(len(task_list))

    engine = open_for_work(chosen.database_url, progress.warn)
    try:
        check_versions(engine, seat_specs)  # a version the registry lacks: refused before a run is opened
        check_draws(engine, spec, seat_specs)  # a pool naming versions the registry lacks: before anything plays
    except SeatSpecError as exc:
        raise InputError(str(exc)) from exc
    cluster = ray_cluster(chosen, ray)
    job = PlayJob(
        settings=chosen, game=spec.name, seats=seat_specs, options=game_options, sampling=sampling,
        concurrency=concurrency, timeout_s=timeout_s,
        config={"episodes": episodes, "samples": samples, "concurrency": concurrency, "tasks": tasks, "split": split,
                "seats": seat_specs, "options": vars(game_options), "sampling": vars(sampling),
                "model": chosen.model},
    )
    if cluster is not None:
        with cluster:
            summary = _play_on_ray(job, task_list, cluster, workers or cluster.capacity, engine, progress)
    elif workers is None or workers == 1:
        summary = _play_here(job, task_list, engine, progress)
    else:
        summary = _play_in_workers(job, task_list, workers, engine, progress)
    failure, seat = _first_failure(engine, summary["run_id"])
    return PlayResult(
        run_id=summary["run_id"], game=spec.name, seats=seat_specs, episodes=summary["episodes"],
        succeeded=summary["succeeded"], summary=summary, first_failure=failure, failed_seat=seat,
        workers_lost=summary.get("workers_lost", []), workers_died=summary.get("workers_died", []),
        worker_errors=summary.get("worker_errors", []), unplayed=summary.get("unplayed", 0),
    )


def _play_here(job: PlayJob, task_list: Sequence[Task], engine: Engine, progress: PlayProgress) -> dict[str, Any]:
    """Every episode in this process. Ctrl-C or SIGTERM: KeyboardInterrupt once the running
    episodes are marked failed and the run interrupted (``play_share``)."""
    from app.playing import play_share, summarize
    from storage.recorder import Recorder

    run = job.run_record()
    with Recorder(engine) as recorder:
        try:
            report = play_share(
                job, task_list, first_index=0, engine=engine, recorder=recorder, run=run,
                on_loaded=progress.loaded, on_episode=lambda e: progress.episode(e.status == "succeeded"),
            )
        except Exception as exc:
            raise RunError(str(exc)) from exc
        recorder.flush()
        summary = summarize(engine, run.id, job.game, completion_tokens=report.completion_tokens, wall_s=report.wall_s)
        recorder.finish_run(run.id, "finished", summary)
    return summary


def _play_in_workers(
    job: PlayJob, task_list: Sequence[Task], workers: int, engine: Engine, progress: PlayProgress
) -> dict[str, Any]:
    """N processes play shares of the episodes; this one writes the call's run (each worker's
    run names it as its parent). Ctrl-C or SIGTERM: the signal's KeyboardInterrupt once the
    workers have stopped and every run is interrupted."""
    from app.playing import summarize
    from app.workers import play_in_workers
    from storage.recorder import Recorder

    workers = min(workers, len(task_list))
    run = job.run_record(workers=workers)
    ready = 0

    def on_ready() -> None:
        nonlocal ready
        ready += 1
        progress.note(f"workers ready {ready}/{workers}")

    started = time.perf_counter()
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        progress.note(f"starting {workers} workers…")
        try:
            outcome = play_in_workers(
                job, task_list, workers=workers, engine=engine, parent_run_id=run.id,
                on_ready=on_ready, on_episode=lambda ok, _tokens: progress.episode(ok),
            )
        except Exception as exc:
            recorder.finish_run(run.id, "failed", {"error": str(exc)})
            raise RunError(f"could not run the workers: {exc}") from exc
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
    job: PlayJob, task_list: Sequence[Task], cluster: Cluster, workers: int, engine: Engine, progress: PlayProgress
) -> dict[str, Any]:
    """Workers on the cluster play the episodes (``app.ray_workers``); this process writes the
    call's run and reports the counts the store shows. Ctrl-C or SIGTERM: the signal's
    KeyboardInterrupt once the workers are killed and every run is interrupted."""
    from app.interrupts import run_interruptible
    from app.playing import summarize
    from app.ray_workers import play_on_ray
    from storage.recorder import Recorder

    workers = min(workers, len(task_list))
    run = job.run_record(workers=workers, ray=cluster.address)

    def show(played: dict[int, str]) -> None:
        ok = sum(status == "succeeded" for status in played.values())
        progress.counts(ok, len(played) - ok)

    started = time.perf_counter()
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        progress.note(f"{workers} ray workers")
        try:
            outcome = run_interruptible(play_on_ray(
                job, task_list, cluster=cluster, workers=workers, engine=engine, parent_run_id=run.id,
                on_progress=show,
            ))
        except KeyboardInterrupt:
            recorder.finish_run(run.id, "interrupted", {})
            raise
        except Exception as exc:
            recorder.finish_run(run.id, "failed", {"error": str(exc)})
            raise RunError(f"could not play on the Ray cluster: {exc}") from exc
        summary = summarize(engine, run.id, job.game, completion_tokens=outcome.completion_tokens,
                            wall_s=time.perf_counter() - started)
        summary.update(workers=workers, replayed=outcome.replayed, unplayed=outcome.unplayed)
        if outcome.lost:
            summary["workers_lost"] = outcome.lost
        if outcome.errors:
            summary["worker_errors"] = outcome.errors
        recorder.finish_run(run.id, "failed" if outcome.unplayed or outcome.errors else "finished", summary)
    return summary


def _first_failure(engine: Engine, run_id: str) -> tuple[str | None, str | None]:
    """"ID at STAGE: ERROR" of the run's first episode that failed or timed out, and the seat whose
    turn failed there (None when no turn did)."""
    from storage.queries import EpisodeFilter, get_episode, list_episodes

    for status in ("failed", "timeout"):
        page = list_episodes(engine, EpisodeFilter(run_id=run_id, status=status), sort="started_at", limit=1)
        if page.items:
            episode = get_episode(engine, page.items[0]["id"])
            stage = episode["error_stage"] or ""
            seat, turn, _ = stage.rpartition(" turn ")  # stages of turns read "SEAT turn N"
            return f"{episode['id'][:12]} at {stage or '?'}: {episode['error']}", seat if turn else None
    return None, None
