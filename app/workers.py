"""`sparring play --workers N`: N processes play the episodes of one command into one store.

The parent splits the command's episodes into N contiguous shares and starts one process
per share, forked from a fresh fork server (spawned where there is none). Each worker loads
its own policies and writes through its own recorder into a run of its own, whose
``parent_id`` is the command's run. The parent follows them through one pipe each: a
progress event per episode, an error message before a worker gives up.

A worker that dies (killed, crashed) does not stop the others. When it is gone, the parent
ends its run and fails its running episodes with "worker K (pid P) exited with ...", and the
command reports it and exits non-zero. Ctrl-C or SIGTERM in the parent sends SIGTERM to every
worker, which marks its running episodes failed and ends its run as interrupted; the command
then exits 130 (Ctrl-C) or 143 (SIGTERM). A second Ctrl-C kills them. Workers ignore SIGINT,
so a terminal's Ctrl-C (which reaches the whole process group) stops them only through the
parent, once. A worker whose parent is gone notices at its next progress event and stops:
its running episodes are marked failed and its run ends ``failed``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from sqlalchemy import Engine

from app.interrupts import exit_code, interruption
from app.playing import PlayJob, play_share, summarize
from graphs.episodes import EpisodeSummary
from graphs.registry import game_modules, game_registry
from graphs.tasks.base import Task
from storage.models import RunStatus
from storage.orphans import fail_exited_workers

POLL_S = 0.2
"""How often the parent looks at its stop flag while it waits for workers."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PRELOAD = ["app.workers", "app.wiring", "evaluation.metrics"]
"""Imported once by the fork server, with every game's modules and graph (``preload()``), so that
a worker starts in milliseconds rather than seconds (never torch: a process that has touched
CUDA cannot be forked)."""


def preload() -> list[str]:
    return [*PRELOAD, *game_modules(), *(game.graph for game in game_registry().values())]


def shares(total: int, parts: int) -> list[range]:
    """``range(total)`` cut into ``parts`` contiguous pieces whose sizes differ by at most one."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    bounds = [total * k // parts for k in range(parts + 1)]
    return [range(bounds[k], bounds[k + 1]) for k in range(parts)]


@dataclass(frozen=True)
class Share:
    """The episodes of one worker: the command's episodes ``first_index`` onwards."""

    worker: int
    workers: int
    first_index: int
    tasks: list[Task]
    parent_run_id: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """the id of the worker's run, known before it starts (`--ray` ends the runs of dead workers by it)"""
    attempt: int = 0
    """0; n for the n-th replay of episodes whose worker died (`--ray`)"""


@dataclass
class WorkersOutcome:
    completion_tokens: int = 0
    died: list[str] = field(default_factory=list)
    """why each worker that did not finish its share is gone"""
    interrupted: KeyboardInterrupt | None = None
    """what stopped the workers: Ctrl-C (KeyboardInterrupt) or SIGTERM (Terminated) in this process"""


@dataclass
class _Worker:
    share: Share
    process: BaseProcess
    conn: Connection | None
    """None once the pipe is closed (the worker exited or the pipe broke)"""
    error: str | None = None

    def exit_reason(self) -> str | None:
        """None when the worker finished its share; otherwise what became of it."""
        code = self.process.exitcode
        if code == 0:
            return None
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"code {code}"
        reason = f"worker {self.share.worker} (pid {self.process.pid}) exited with {how}"
        return f"{reason}: {self.error}" if self.error else reason


def play_in_workers(
    job: PlayJob,
    tasks: Sequence[Task],
    *,
    workers: int,
    engine: Engine,
    parent_run_id: str,
    on_ready: Callable[[], None],
    on_episode: Callable[[bool, int], None],
) -> WorkersOutcome:
    """Play ``tasks`` in ``workers`` processes (at most one per task); ``on_ready`` is called
    when a worker has loaded its policies, ``on_episode(succeeded, completion_tokens)`` after
    each episode of any worker. The workers' runs that did not end properly are ended here."""
    context = _context()
    parts = shares(len(tasks), min(workers, len(tasks)))
    outcome = WorkersOutcome()
    stops: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: stops.append(signum)) for sig in STOP_SIGNALS}
    running: list[_Worker] = []
    try:
        for k, part in enumerate(parts):
            share = Share(k, len(parts), part.start, list(tasks[part.start : part.stop]), parent_run_id)
            ours, theirs = context.Pipe()
            process = context.Process(target=worker_main, args=(theirs,), name=f"sparring-worker-{k}")
            process.start()
            theirs.close()
            running.append(_Worker(share, process, ours))
        for worker in running:  # sent once all have started: a long task list waits for its reader
            _hand_out(job, worker)
        _follow(running, stops, outcome, on_ready, on_episode)
    except BaseException:
        _stop(running, signal.SIGKILL)
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for worker in running:
            worker.process.join()
    reasons = {w.process.pid: r for w in running if w.process.pid is not None and (r := w.exit_reason())}
    status = RunStatus.FAILED if outcome.interrupted is None else RunStatus.INTERRUPTED
    fail_exited_workers(engine, parent_run_id, reasons, status=status)
    if outcome.interrupted is None:
        outcome.died = list(reasons.values())
    return outcome


def _context() -> multiprocessing.context.BaseContext:
    """A fork server where there is one (a fresh process forked per worker: no threads or
    CUDA state inherited from this one), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload())
    return context


def _hand_out(job: PlayJob, worker: _Worker) -> None:
    assert worker.conn is not None
    try:
        worker.conn.send((job, worker.share))
    except OSError:  # it died before reading its share: its exit code tells why
        worker.conn.close()
        worker.conn = None


def _follow(
    running: list[_Worker],
    stops: list[int],
    outcome: WorkersOutcome,
    on_ready: Callable[[], None],
    on_episode: Callable[[bool, int], None],
) -> None:
    """Read the workers' events until every pipe is closed; a stop request sends SIGTERM to
    the workers, a second one SIGKILL."""
    handled = 0
    while any(w.conn is not None for w in running):
        by_conn = {w.conn: w for w in running if w.conn is not None}
        for conn in wait(list(by_conn), timeout=POLL_S):
            worker = by_conn[conn]
            try:
                event = conn.recv()
            except (EOFError, OSError):
                conn.close()
                worker.conn = None
                continue
            if event[0] == "episode":
                on_episode(event[1], event[2])
                outcome.completion_tokens += event[2]
            elif event[0] == "ready":
                on_ready()
            elif event[0] == "error":
                worker.error = event[1]
        if len(stops) > handled:
            handled = len(stops)
            if outcome.interrupted is None:  # the first signal decides the exit code
                outcome.interrupted = interruption(stops[0])
            _stop(running, signal.SIGTERM if handled == 1 else signal.SIGKILL)


def _stop(running: list[_Worker], sig: signal.Signals) -> None:
    for worker in running:
        if worker.process.is_alive() and worker.process.pid is not None:
            try:
                os.kill(worker.process.pid, sig)
            except ProcessLookupError:
                pass


# --- in the worker process ------------------------------------------------------------------


class ParentGone(RuntimeError):
    """The `sparring play` process that started this worker has exited."""


def worker_main(conn: Connection) -> None:
    """Entry point of a worker process: play the share sent on ``conn``, report on it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches workers through the parent only
    try:
        job, share = conn.recv()
    except EOFError:  # the parent exited before handing out the work: nothing was started
        sys.exit(1)
    job = _place(job, share)
    code = 0
    try:
        _play(job, share, conn)
    except KeyboardInterrupt as stop:  # the parent's SIGTERM
        code = exit_code(stop)
    except Exception as exc:
        _send(conn, ("error", str(exc)), required=False)
        code = 1
    conn.close()
    sys.exit(code)


def _play(job: PlayJob, share: Share, conn: Connection) -> None:
    play_one_share(
        job,
        share,
        on_loaded=lambda: _send(conn, ("ready",)),
        on_episode=lambda e: _send(conn, ("episode", e.status == "succeeded", e.completion_tokens)),
    )


def play_one_share(
    job: PlayJob, share: Share, *, on_loaded: Callable[[], None], on_episode: Callable[[EpisodeSummary], None]
) -> dict[str, Any]:
    """Play ``share`` in this process into its own run (a child of the command's), through a
    store connection of its own; returns the run's summary."""
    from storage.engine import WORKER_POSTGRES_POOL, open_store
    from storage.recorder import Recorder

    engine = open_store(job.settings.database_url, pool=WORKER_POSTGRES_POOL)
    run = replace(
        job.run_record(
            parent_id=share.parent_run_id,
            worker=share.worker,
            workers=share.workers,
            first_index=share.first_index,
            episodes=len(share.tasks),
            **({"attempt": share.attempt} if share.attempt else {}),
        ),
        id=share.run_id,
    )
    started = time.perf_counter()
    with Recorder(engine) as recorder:
        report = play_share(
            job, share.tasks, first_index=share.first_index, engine=engine, recorder=recorder, run=run,
            on_loaded=on_loaded, on_episode=on_episode,
        )
        recorder.flush()
        summary = summarize(
            engine, run.id, job.game, completion_tokens=report.completion_tokens, wall_s=time.perf_counter() - started
        )
        recorder.finish_run(run.id, "finished", summary)
    engine.dispose()
    return summary


def _send(conn: Connection, event: tuple[Any, ...], *, required: bool = True) -> None:
    try:
        conn.send(event)
    except OSError as exc:  # BrokenPipeError and kin: nobody is reading any more
        if required:
            raise ParentGone(f"the `sparring play` process that started this worker is gone ({exc})") from None


def _place(job: PlayJob, share: Share) -> PlayJob:
    """Give a worker that runs a model its part of the machine: GPU ``k mod #GPUs`` when the
    device is left to choose and several are visible, else (on CPU) its share of the cores,
    so that N workers do not each start one thread per core."""
    uses_model = any(spec == "model" or spec.startswith("model:") for spec in job.seats.values())
    if not uses_model or job.settings.device not in ("auto", "cuda", "cpu"):
        return job
    import torch

    gpus = torch.cuda.device_count() if job.settings.device != "cpu" and torch.cuda.is_available() else 0
    if gpus > 1:
        return replace(job, settings=job.settings.model_copy(update={"device": f"cuda:{share.worker % gpus}"}))
    if gpus == 0:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // share.workers))
    return job
