"""Episodes that will never get their end: marking them failed instead of leaving them running.

A process killed in the middle of a run leaves its open episodes ``running``. They must never
pass for finished, nor stay "running" forever: ``mark_orphans`` finds them, the recorder's
``abort_running`` marks a run's open episodes on Ctrl-C, ``fail_exited_workers`` lets
`sparring play --workers N` mark the runs of the workers that died under it at once, and
``end_runs`` does it by run id (`--ray`: the workers' pids are on other machines).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Collection, Mapping

from sqlalchemy import ColumnElement, Connection, Engine, select, update

from storage.engine import in_transaction
from storage.models import RunStatus
from storage.records import EpisodeStatus, utcnow
from storage.tables import EPISODE_PAYLOADS as _EPISODE_PAYLOADS
from storage.tables import EPISODES as _EPISODES
from storage.tables import RUNS as _RUNS

ORPHAN_ERROR = "interrupted: the process playing it ended"
INTERRUPTED_STAGE = "interrupted"



def fail_running_episodes(conn: Connection, which: ColumnElement[bool], error: str) -> int:
    """Mark the ``running`` episodes that match ``which`` as failed (error_stage
    "interrupted", payload error ``error``); returns how many.

    One statement picks and marks the episodes, and only those get the error: under READ
    COMMITTED, an episode a still-living worker commits between two statements that each
    chose "the running ones" would otherwise be failed without its error."""
    running = (_EPISODES.c.status == EpisodeStatus.RUNNING.value) & which
    failed = conn.execute(
        update(_EPISODES)
        .where(running)
        .values(status=EpisodeStatus.FAILED.value, error_stage=INTERRUPTED_STAGE, finished_at=utcnow())
        .returning(_EPISODES.c.id)
    ).scalars().all()
    if failed:
        conn.execute(update(_EPISODE_PAYLOADS).where(_EPISODE_PAYLOADS.c.episode_id.in_(failed)).values(error=error))
    return len(failed)


def fail_exited_workers(
    engine: Engine, parent_id: str, reasons: Mapping[int, str], *, status: RunStatus = RunStatus.FAILED
) -> int:
    """End the still-running worker runs of the command run ``parent_id`` whose process is gone;
    returns how many of their episodes were still running.

    ``reasons`` maps each exited worker's pid to why it is gone ("worker 2 (pid 4242) exited
    with signal SIGKILL"): the run gets ``status`` and that reason in its summary, and its
    running episodes fail with it. Runs their worker ended properly are left as they are.
    """

    with engine.connect() as conn:
        runs = conn.execute(
            select(_RUNS.c.id, _RUNS.c.pid).where(
                (_RUNS.c.parent_id == parent_id)
                & (_RUNS.c.status == RunStatus.RUNNING.value)
                & _RUNS.c.pid.in_(list(reasons))
            )
        ).all() if reasons else []
    return end_runs(engine, {run_id: reasons[pid] for run_id, pid in runs}, status=status)


def end_runs(
    engine: Engine, reasons: Mapping[str, str], *, status: RunStatus = RunStatus.FAILED, error: str | None = None
) -> int:
    """End the runs ``reasons`` names (run id -> why it ended) that are still ``running``: each
    gets ``status`` and ``{"error": reason}`` as its summary, and its running episodes fail with
    ``error``, or "interrupted: REASON" when it is None. Returns how many episodes were marked."""

    def mark(conn: Connection) -> int:
        running = conn.execute(
            select(_RUNS.c.id).where(_RUNS.c.id.in_(list(reasons)) & (_RUNS.c.status == RunStatus.RUNNING.value))
        ).scalars().all()
        marked = 0
        for run_id in running:
            reason = reasons[run_id]
            conn.execute(
                update(_RUNS)
                .where(_RUNS.c.id == run_id)
                .values(status=status.value, summary={"error": reason}, finished_at=utcnow())
            )
            marked += fail_running_episodes(conn, _EPISODES.c.run_id == run_id, error or f"interrupted: {reason}")
        return marked

    return in_transaction(engine, mark) if reasons else 0


def wait_for_local_processes(engine: Engine, run_ids: Collection[str], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` until the processes of the runs ``run_ids`` that ran on this host
    are gone (a killed process may still commit what it was writing); returns whether they are.
    Processes of other hosts cannot be checked from here and are not waited for."""
    with engine.connect() as conn:
        pids = conn.execute(
            select(_RUNS.c.pid).where(_RUNS.c.id.in_(list(run_ids)) & (_RUNS.c.host == socket.gethostname()))
        ).scalars().all() if run_ids else []
    deadline = time.monotonic() + timeout_s
    while any(process_exists(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def mark_orphans(engine: Engine) -> int:
    """Fail the episodes left ``running`` by a process that is gone; returns how many.

    An episode is orphaned when its run is no longer ``running``, or when its run's process
    ran on this host and no longer exists (such runs are marked ``interrupted``). Runs of
    other hosts are left alone: their processes cannot be checked from here.
    """
    with engine.connect() as conn:
        local_runs = conn.execute(
            select(_RUNS.c.id, _RUNS.c.pid).where(
                (_RUNS.c.status == RunStatus.RUNNING.value) & (_RUNS.c.host == socket.gethostname())
            )
        ).all()
    dead = [run_id for run_id, pid in local_runs if not process_exists(pid)]

    def mark(conn: Connection) -> int:
        if dead:
            conn.execute(
                update(_RUNS)
                .where(_RUNS.c.id.in_(dead) & (_RUNS.c.status == RunStatus.RUNNING.value))
                .values(status=RunStatus.INTERRUPTED.value, finished_at=utcnow())
            )
        ended_runs = select(_RUNS.c.id).where(_RUNS.c.status != RunStatus.RUNNING.value)
        return fail_running_episodes(conn, _EPISODES.c.run_id.in_(ended_runs), ORPHAN_ERROR)

    return in_transaction(engine, mark)


def process_exists(pid: int) -> bool:
    """Whether a process of this host has ``pid`` (any owner)."""
    if os.name == "nt":  # there os.kill(pid, 0) would send a CTRL_C_EVENT; assume alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True
