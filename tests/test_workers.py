"""`sparring play --workers N` on real stores, and many processes writing one SQLite file.

The CLI runs as a subprocess (`python -m app.cli`) with scripted seats, so no model is loaded
and a worker can be stopped or killed from here by the pid its run records.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

import storage.engine
from app.workers import shares
from factories import record_episode, run_record
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.models import Episode, EpisodePayload, Run, Turn
from storage.queries import EpisodeFilter, count_episodes_by_status, list_episodes
from storage.recorder import Recorder

ROOT = Path(__file__).resolve().parents[1]
SCRIPTED = ["--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct"]
WORKERS = {"sqlite": 4, "postgresql": 8}


def _play(url: str, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "app.cli", "play", "math-reflection", "--db", url, "-f", "json", *SCRIPTED, *args]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str], timeout: float = 120) -> tuple[int, dict[str, Any] | None, str]:
    """Exit code, the JSON summary (None if none was printed) and stderr."""
    stdout, stderr = process.communicate(timeout=timeout)
    lines = stdout.strip().splitlines()
    return process.returncode, json.loads(lines[-1])[0] if lines else None, stderr


def _runs(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(Run).order_by(Run.started_at)))


def _episodes(engine: Engine) -> list[Any]:
    """(run_id, task_id, seed, status, num_turns, turns logged, error) of every episode."""
    turns = select(func.count()).where(Turn.episode_id == Episode.id).scalar_subquery()
    query = select(
        Episode.run_id, Episode.task_id, Episode.seed, Episode.status, Episode.num_turns, turns, EpisodePayload.error
    ).join(EpisodePayload, EpisodePayload.episode_id == Episode.id)
    with engine.connect() as conn:
        return list(conn.execute(query))


@pytest.mark.parametrize(("total", "parts"), [(10, 3), (3, 3), (1000, 8), (7, 1)])
def test_shares_cover_every_episode_once(total: int, parts: int) -> None:
    pieces = shares(total, parts)
    assert [i for piece in pieces for i in piece] == list(range(total))
    assert max(map(len, pieces)) - min(map(len, pieces)) <= 1


def test_workers_play_every_episode_once(store_url: str) -> None:
    """4 workers on SQLite, 8 on PostgreSQL, writing at once: each episode exactly once, with
    the task and seed it has when one process plays the command."""
    workers = WORKERS[store_url.split(":")[0].split("+")[0]]
    n, samples, seed = 400, 2, 5
    code, summary, stderr = _finish(_play(store_url, "-n", str(n), "-c", "4", "--samples", str(samples),
                                          "--seed", str(seed), "--workers", str(workers)))
    assert code == 0, stderr
    assert summary is not None
    assert (summary["episodes"], summary["succeeded"], summary["workers"]) == (n, n, workers)

    engine = open_store(store_url)
    parent, *children = _runs(engine)
    assert parent.parent_id is None and parent.status == "finished" and parent.summary["episodes"] == n
    assert len(children) == workers and {c.parent_id for c in children} == {parent.id}
    assert {c.status for c in children} == {"finished"} and len({c.pid for c in children}) == workers
    for c in children:  # each worker wrote while another one did
        assert any(d.started_at < c.finished_at and c.started_at < d.finished_at for d in children if d is not c)

    episodes = _episodes(engine)
    assert len(episodes) == n and {e.status for e in episodes} == {"succeeded"}
    tasks = load_tasks("arithmetic", n=n // samples, seed=seed, split="train")
    one_process = [(t.id, seed + i) for i, t in enumerate(t for t in tasks for _ in range(samples))]
    assert sorted((e.task_id, e.seed) for e in episodes) == sorted(one_process)
    assert all(e.num_turns == e[5] >= 2 for e in episodes)  # every turn of every episode was logged
    assert list_episodes(engine, EpisodeFilter(run_id=parent.id)).total == n  # the command's run covers them
    engine.dispose()


def _stop_mid_episode(engine: Engine, worker: int) -> Any:
    """SIGSTOP worker ``worker`` at a moment when the store shows it has finished some
    episodes and has some running; returns its run."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        runs = [r for r in _runs(engine) if r.parent_id and r.config["worker"] == worker]
        if runs and {"succeeded", "running"} <= set(count_episodes_by_status(engine, runs[0].id)):
            os.kill(runs[0].pid, signal.SIGSTOP)
            if count_episodes_by_status(engine, runs[0].id).get("running"):
                return runs[0]
            os.kill(runs[0].pid, signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError(f"worker {worker} never had running episodes in the store")


def test_a_killed_worker_fails_its_running_episodes_and_the_others_finish(store_url: str) -> None:
    engine = open_store(store_url)
    n, workers = 600, 3
    process = _play(store_url, "-n", str(n), "-c", "4", "--workers", str(workers))
    victim = _stop_mid_episode(engine, worker=1)
    os.kill(victim.pid, signal.SIGKILL)
    code, summary, stderr = _finish(process)

    reason = f"worker 1 (pid {victim.pid}) exited with signal SIGKILL"
    assert code == 1 and reason in stderr.replace("\n", " ")
    assert summary is not None and summary["workers_died"] == [reason]
    parent, *children = _runs(engine)
    assert parent.status == "failed"
    by_worker = {c.config["worker"]: c for c in children}
    assert by_worker[1].status == "failed" and by_worker[1].summary == {"error": reason}
    assert {by_worker[k].status for k in (0, 2)} == {"finished"}

    episodes = _episodes(engine)
    assert len({e.seed for e in episodes}) == len(episodes) < n  # nothing played twice; the victim's rest never
    mine = [e for e in episodes if e.run_id == victim.id]
    cut = [e for e in mine if e.status != "succeeded"]
    assert cut and {(e.status, e.error) for e in cut} == {("failed", f"interrupted: {reason}")}
    others = [e for e in episodes if e.run_id != victim.id]
    assert len(others) == 2 * n // workers and {e.status for e in others} == {"succeeded"}
    assert summary["episodes"] == len(episodes) and summary["failed"] == len(cut)
    engine.dispose()


def test_ctrl_c_stops_every_worker_and_keeps_what_they_finished(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    engine = open_store(url)
    process = _play(url, "-n", "2000", "-c", "4", "--workers", "2")
    for worker in (0, 1):  # both have started playing
        os.kill(_stop_mid_episode(engine, worker).pid, signal.SIGCONT)
    process.send_signal(signal.SIGINT)
    code, summary, stderr = _finish(process)

    assert code == 130 and summary is None and "interrupted" in stderr
    assert {r.status for r in _runs(engine)} == {"interrupted"}
    statuses = Counter(e.status for e in _episodes(engine))
    assert statuses["succeeded"] > 0 and statuses["failed"] > 0 and set(statuses) == {"succeeded", "failed"}
    assert {e.error for e in _episodes(engine) if e.status == "failed"} == {
        "interrupted by the user (Ctrl-C or SIGTERM)"
    }
    engine.dispose()


# --- SQLite: many processes, one file ---------------------------------------------------------


def _write_at_once(url: str, go: Any, episodes: int) -> None:
    """Target of a child process: one transaction per record, from the moment ``go`` is set."""
    engine = open_store(url)
    with Recorder(engine, batch_size=1, flush_interval_s=0) as recorder:
        run = run_record()
        recorder.start_run(run)
        go.wait()
        for _ in range(episodes):
            record_episode(recorder, run_id=run.id, turns=3)
        recorder.finish_run(run.id, "finished", {})
    engine.dispose()


def test_sqlite_writers_in_six_processes_never_see_a_locked_database(tmp_path: Path) -> None:
    """Six recorders commit one record at a time while another connection holds the write
    lock for a while: they wait (busy_timeout, then retries), none fails."""
    path = tmp_path / "busy.db"
    url = f"sqlite:///{path}"
    open_store(url).dispose()
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    writers = [context.Process(target=_write_at_once, args=(url, go, 25)) for _ in range(6)]
    for writer in writers:
        writer.start()
    blocker = sqlite3.connect(path, isolation_level=None)
    go.set()
    time.sleep(0.3)
    blocker.execute("BEGIN IMMEDIATE")  # everyone queues behind this lock for a second
    time.sleep(1.0)
    blocker.execute("COMMIT")
    for writer in writers:
        writer.join(timeout=120)
    assert [w.exitcode for w in writers] == [0] * 6  # "database is locked" would be 1
    engine = open_store(url)
    episodes = _episodes(engine)
    assert len(episodes) == 150 and {e.status for e in episodes} == {"succeeded"}
    assert {e[5] for e in episodes} == {3}
    engine.dispose()


def test_recorder_retries_a_write_that_found_sqlite_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a busy_timeout shorter than the lock is held, the write fails with "database is
    locked"; the recorder retries it with backoff and it lands once the lock is released."""
    path = tmp_path / "locked.db"
    open_store(f"sqlite:///{path}").dispose()
    pragmas = tuple("busy_timeout=20" if p.startswith("busy_timeout") else p for p in storage.engine.SQLITE_PRAGMAS)
    monkeypatch.setattr(storage.engine, "SQLITE_PRAGMAS", pragmas)
    engine = open_store(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 20
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    threading.Timer(0.5, blocker.execute, args=("COMMIT",)).start()
    started = time.perf_counter()
    with Recorder(engine) as recorder:
        episode = record_episode(recorder)
        recorder.flush()
        assert recorder.stats.dropped == 0
    assert time.perf_counter() - started >= 0.45  # waited out the lock, by retrying past busy_timeout
    assert list_episodes(engine).items[0]["id"] == episode.start.id
    engine.dispose()


# --- training under `accelerate launch` -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["kto", "--role", "actor"], "build it first with `sparring datasets build kto --role actor`"),
        (["ppo", "--role", "actor", "--dataset", "1"], "`sparring train ppo` trains in one process"),
    ],
)
def test_train_under_accelerate_launch_needs_one_snapshot_and_a_data_parallel_trainer(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every process of `accelerate launch` runs the command; rank 0 alone records and
    publishes, so they must share a snapshot built beforehand."""
    from typer.testing import CliRunner

    from app.cli import app

    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'train.db'}")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split())


@pytest.mark.parametrize(("launched", "args", "message"), [
    (True, ["sft", "--role", "actor", "--dataset", "1"], "SPARRING_TRAIN_PROCESSES=2 starts the training processes "
                                                          "itself; under accelerate launch set it to 1"),
    (False, ["ppo", "--role", "actor", "--dataset", "1"], "SPARRING_TRAIN_PROCESSES=2: the ppo trainer trains in "
                                                           "one process"),
    (False, ["sft", "--role", "actor", "--dataset", "1", "--batch-size", "3"],
     "SPARRING_TRAIN_PROCESSES=2: an optimiser step of 3 x 1 rows"),
], ids=["under-accelerate", "ppo", "odd-batch"])
def test_train_in_several_processes_refuses_what_cannot_share_a_job(
    launched: bool, args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from app.cli import app

    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'train.db'}")
    monkeypatch.setenv("SPARRING_TRAIN_PROCESSES", "2")
    if launched:
        monkeypatch.setenv("WORLD_SIZE", "2")
    result = CliRunner().invoke(app, ["train", *args])
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
