"""The fault campaign as tests: `sparring` processes killed at seeded random points, and many
writing one store at once, on a real SQLite file and a real PostgreSQL database.

Every command runs as a user starts it (a child process, `python -m app.cli`). Seats are
scripted bots, or the tiny random model for `train` and `deploy`, so no real model loads.
What must hold after each SIGKILL: no succeeded episode misses a turn or a reward, every
episode committed before the kill is still there as it was, and the next command marks what
the dead process left running; a killed `train` or `deploy` leaves no half-published adapter
and no registry row without its folder, and the next one works.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from ctrl_c import default_sigint
from model_logs import as_model_turns
from sqlalchemy import Engine, func, select, text
from tiny_model import save_random_lora, save_tiny_model
from transformers import AutoModelForCausalLM

from storage.engine import open_store, store_key
from storage.models import AdapterVersion, Episode, EpisodePayload, Reward, Run, TrainingJob, Turn
from storage.orphans import INTERRUPTED_STAGE, ORPHAN_ERROR, process_exists
from training.adapter_folders import NAME_PATTERN, TMP_PREFIX, verify_folder
from training.jobs import STALE_JOB_ERROR
from training.registry import publish

SCRIPTED_SEATS = ["--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct"]
PLAY = ["play", "math-reflection", "-c", "8", *SCRIPTED_SEATS, "--format", "json"]
START_TIMEOUT_S = 300.0  # generous: the suite shares 2 cores with other work


# --- child processes ----------------------------------------------------------------------


def _child_env(folder: Path, url: str, **more: str) -> dict[str, str]:
    """The environment of a `sparring` child: the store at ``url``, data and temporary folders
    (training jobs') in ``folder``, none of the caller's other SPARRING_* settings."""
    (folder / "tmp").mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    environ.update(SPARRING_DATABASE_URL=url, SPARRING_DATA_DIR=str(folder / "data"), TMPDIR=str(folder / "tmp"),
                   SPARRING_CACHE_DIR=str(folder / "cache"), **more)
    return environ


@dataclass
class Child:
    """A `sparring` command running in a child process, its output going to files."""

    process: subprocess.Popen
    stdout: Path
    stderr: Path
    backend_name: str  # the PostgreSQL application name of its connections (libpq's PGAPPNAME)

    @classmethod
    def start(cls, args: list[str], env: dict[str, str], logs: Path) -> Child:
        stdout, stderr = logs.with_suffix(".out"), logs.with_suffix(".err")
        name = f"sparring-test-child-{uuid.uuid4().hex[:12]}"
        with stdout.open("w") as out, stderr.open("w") as err:
            process = subprocess.Popen([sys.executable, "-m", "app.cli", *args], stdout=out, stderr=err,
                                       env={**env, "PGAPPNAME": name}, cwd=logs.parent, preexec_fn=default_sigint)
        return cls(process, stdout, stderr, name)

    def kill(self) -> None:
        self.process.kill()
        assert self.process.wait(timeout=30) == -9

    def kill_and_settle(self, engine: Engine) -> None:
        """SIGKILL, then wait until the store has finished what the process sent it.

        PostgreSQL may still commit a killed client's last transaction after the process is
        gone (the COMMIT was on the wire; the server backend runs it before it reads the closed
        socket): a snapshot is final only once the client's backends have ended. SQLite commits
        in the killed process itself, so nothing is left in flight there."""
        self.kill()
        if engine.dialect.name != "postgresql":
            return
        query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                if conn.scalar(query, {"name": self.backend_name}) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError(f"the killed process's PostgreSQL backends ({self.backend_name}) lived on for 60 s")

    def finish(self, timeout: float = 300) -> tuple[int, str, str]:
        code = self.process.wait(timeout=timeout)
        return code, self.stdout.read_text(), self.stderr.read_text()

    def wait_for(self, found: Callable[[], object], what: str, poll_s: float = 0.05) -> object:
        """Poll ``found`` every ``poll_s`` until it returns something; fail if the process ends first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            value = found()
            if value:
                return value
            if self.process.poll() is not None:
                raise AssertionError(f"the process ended before {what}: {self.stderr.read_text()}")
            time.sleep(poll_s)
        self.process.kill()
        raise AssertionError(f"no {what} within {START_TIMEOUT_S:.0f} s")


# --- what the store holds -----------------------------------------------------------------


def _run_of(engine: Engine, pid: int) -> str | None:
    with engine.connect() as conn:
        return conn.scalar(select(Run.id).where(Run.pid == pid, Run.host == socket.gethostname()))


def _succeeded(engine: Engine) -> dict[str, tuple[int, int, int]]:
    """Each succeeded episode: (num_turns, turns stored, rewards stored)."""
    turns = select(Turn.episode_id, func.count().label("n")).group_by(Turn.episode_id).subquery()
    rewards = select(Reward.episode_id, func.count().label("n")).group_by(Reward.episode_id).subquery()
    query = (
        select(Episode.id, Episode.num_turns, func.coalesce(turns.c.n, 0), func.coalesce(rewards.c.n, 0))
        .outerjoin(turns, turns.c.episode_id == Episode.id)
        .outerjoin(rewards, rewards.c.episode_id == Episode.id)
        .where(Episode.status == "succeeded")
    )
    with engine.connect() as conn:
        return {episode_id: tuple(counts) for episode_id, *counts in conn.execute(query)}


def _assert_succeeded_are_whole(engine: Engine) -> None:
    """Every succeeded episode has all its turns (indices 0..n-1) and a reward for each turn
    (math-reflection rewards the actor's answers and the critic's verdicts)."""
    unrewarded = select(Turn.id).where(~select(Reward.id).where(Reward.turn_id == Turn.id).exists())
    with engine.connect() as conn:
        broken = conn.execute(
            select(Episode.id, Episode.num_turns, func.count(Turn.id), func.min(Turn.idx), func.max(Turn.idx))
            .outerjoin(Turn, Turn.episode_id == Episode.id)
            .where(Episode.status == "succeeded")
            .group_by(Episode.id, Episode.num_turns)
            .having((func.count(Turn.id) != Episode.num_turns) | (func.min(Turn.idx) != 0)
                    | (func.max(Turn.idx) != Episode.num_turns - 1))
        ).all()
        missing_rewards = conn.execute(
            select(func.count()).select_from(Turn).join(Episode, Episode.id == Turn.episode_id)
            .where(Episode.status == "succeeded", Turn.id.in_(unrewarded))
        ).scalar_one()
    assert broken == [], f"succeeded episodes missing turns: {broken[:5]}"
    assert missing_rewards == 0, f"{missing_rewards} turn(s) of succeeded episodes have no reward"


def _running_episodes(engine: Engine, run_id: str) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(select(Episode.id).where(Episode.run_id == run_id, Episode.status == "running")))


def _assert_marked(engine: Engine, run_id: str, left_running: set[str]) -> None:
    """The killed run is interrupted and what it left running failed as interrupted."""
    assert _run_status(engine, run_id) == "interrupted"
    with engine.connect() as conn:
        marked = conn.execute(
            select(Episode.status, Episode.error_stage, EpisodePayload.error)
            .join(EpisodePayload, EpisodePayload.episode_id == Episode.id)
            .where(Episode.id.in_(left_running))
        ).all()
    assert _running_episodes(engine, run_id) == set()
    assert marked == [("failed", INTERRUPTED_STAGE, ORPHAN_ERROR)] * len(left_running)


# --- SIGKILL of play ----------------------------------------------------------------------


def test_play_killed_at_random_points_keeps_what_it_committed(store_url: str, tmp_path: Path) -> None:
    rng = random.Random(15)
    env = _child_env(tmp_path, store_url)
    engine = open_store(store_url)
    killed: list[tuple[str, set[str]]] = []  # each killed run and the episodes it left running
    try:
        for attempt in range(3):
            child = Child.start([*PLAY, "-n", "20000", "--seed", str(attempt)], env, tmp_path / f"play{attempt}")
            run_id = child.wait_for(lambda: _run_of(engine, child.process.pid), "its run")
            if killed:  # this play marked the leftovers of the one killed before, before it started its own run
                _assert_marked(engine, *killed[-1])
            child.wait_for(lambda: _succeeded_in(engine, run_id), "its first episode")
            time.sleep(rng.uniform(0.0, 1.0))
            committed = _succeeded(engine)
            child.kill_and_settle(engine)
            after = _succeeded(engine)
            assert committed.items() <= after.items()  # nothing committed is lost or changed
            _assert_succeeded_are_whole(engine)
            assert _run_status(engine, run_id) == "running"  # SIGKILL: nothing could mark it
            killed.append((run_id, _running_episodes(engine, run_id)))

        code, out, err = Child.start([*PLAY, "-n", "16"], env, tmp_path / "last").finish()
        assert code == 0, err
        assert json.loads(out)[0]["succeeded"] == 16
        _assert_marked(engine, *killed[-1])
        if killed[-1][1]:
            assert f"what stopped processes left running: {len(killed[-1][1])} episode(s)" in err
        _assert_succeeded_are_whole(engine)
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).where(Episode.status == "running")) == 0
            assert sorted(conn.scalars(select(Run.status))) == ["finished"] + ["interrupted"] * 3
    finally:
        engine.dispose()


def _succeeded_in(engine: Engine, run_id: str) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).where(Episode.run_id == run_id, Episode.status == "succeeded"))


def _run_status(engine: Engine, run_id: str) -> str | None:
    with engine.connect() as conn:
        return conn.scalar(select(Run.status).where(Run.id == run_id))


# --- Ctrl-C and SIGTERM of every long command ------------------------------------------------


def _task_file(folder: Path, rows: int) -> Path:
    """``rows`` distinct sums ("What is a + 7?"), GSM8K-style: enough that no command ends before it is stopped."""
    path = folder / f"sums{rows}.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {a} + 7?", "answer": f"#### {a + 7}"}) + "\n"
                            for a in range(rows)))
    return path


def _any_succeeded(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).where(Episode.status == "succeeded"))


def _assert_stopped(child: Child, engine: Engine, signum: signal.Signals, message: str) -> None:
    """Stop ``child`` with ``signum``: it exits as shells report the signal (130 for Ctrl-C, 143
    for SIGTERM) with ``message`` on stderr, having marked what it ran: some run interrupted,
    no run and no episode of the store left running."""
    child.process.send_signal(signum)
    exited, _, err = child.finish(timeout=120)
    assert exited == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], err
    assert message in " ".join(err.split()), err  # rich wraps stderr at 80 columns
    assert "Traceback" not in err
    with engine.connect() as conn:
        runs = list(conn.scalars(select(Run.status)))
        running = conn.scalar(select(func.count()).where(Episode.status == "running"))
    assert "interrupted" in runs and "running" not in runs, runs
    assert running == 0
    _assert_succeeded_are_whole(engine)


@pytest.mark.parametrize(
    ("signum", "workers"), [(signal.SIGINT, 1), (signal.SIGTERM, 1), (signal.SIGTERM, 2)]
)  # Ctrl-C of --workers N: test_workers.py
def test_play_stopped_by_a_signal_marks_its_work_and_exits_with_the_signals_code(
    signum: signal.Signals, workers: int, tmp_path: Path
) -> None:
    """Ctrl-C exits 130 and SIGTERM 143, as shells report them (SIGTERM exited 130 before, and
    always with --workers). How long the stop takes is bench/stop_latency.py's figure, not a test's."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    try:
        child = Child.start([*PLAY, "-n", "20000", "--workers", str(workers)], _child_env(tmp_path, url),
                            tmp_path / "play")
        child.wait_for(lambda: _any_succeeded(engine), "its first episode")
        _assert_stopped(child, engine, signum, "interrupted: finished episodes are kept, running ones are marked "
                        "failed")
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(Run)) == (1 if workers == 1 else 1 + workers)
    finally:
        engine.dispose()


def test_eval_stopped_by_sigterm_marks_its_run_and_exits_143(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    evaluate = ["eval", "--tasks", str(_task_file(tmp_path, 20000)), "-n", "20000", "-c", "8", *SCRIPTED_SEATS]
    try:
        child = Child.start(evaluate, _child_env(tmp_path, url), tmp_path / "eval")
        child.wait_for(lambda: _any_succeeded(engine), "its first episode")
        _assert_stopped(child, engine, signal.SIGTERM,
                        "interrupted: the unfinished evaluation run is marked interrupted and will not be reused")
    finally:
        engine.dispose()


RETRAIN_STOPPED = ("interrupted: every committed episode, dataset and adapter is kept; the round's running episodes "
                   "and training job are marked failed")


def test_retrain_stopped_by_sigterm_marks_its_round_and_exits_143(tiny_base: Path, tmp_path: Path) -> None:
    """Stopped while its round plays (the learner seats scripted: no rows to train on, but the
    round serves its gates from the tiny model, which it loads)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    retrain = ["retrain", "--practice", "0", "--no-report", "--every-episodes", "20000", "--samples", "1",
               "--eval-tasks", "4", "-c", "8", *SCRIPTED_SEATS]
    try:
        child = Child.start(retrain, _child_env(tmp_path, url, SPARRING_MODEL=str(tiny_base)), tmp_path / "retrain")
        child.wait_for(lambda: _any_succeeded(engine), "its first episode")
        _assert_stopped(child, engine, signal.SIGTERM, RETRAIN_STOPPED)
        with engine.connect() as conn:
            assert conn.scalars(select(Run.config)).one()["purpose"] == "retrain round 1"
    finally:
        engine.dispose()


def test_retrain_stopped_by_sigterm_while_training_stops_the_trainer_and_exits_143(
    tiny_base: Path, tmp_path: Path, sums: Path
) -> None:
    """SIGTERM while the round's training job trains in its child process (the actor's right
    answers logged as the model's give it rows; 100000 steps would outlast any test) ends the
    trainer now, not when its training would have ended: the job is marked failed, its temporary
    folder removed, the round's run marked interrupted, and retrain exits 143."""
    url, env = _store_with_actor_rows(tiny_base, tmp_path, sums)
    retrain = ["retrain", "--roles", "actor", "--practice", "0", "--no-report", "--every-episodes", "2", "--samples",
               "1", "--eval-tasks", "2", "--min-rows", "1", "--max-steps", "100000", "-c", "2", *SCRIPTED_SEATS]
    engine = open_store(url)
    try:
        child = Child.start(retrain, env, tmp_path / "retrain")
        # the job's row says running a moment before the trainer process starts; its start is the moment to stop it
        trainer = child.wait_for(lambda: _job_running(engine) and _trainer_process(child.process.pid),
                                 "its trainer process")
        _assert_stopped(child, engine, signal.SIGTERM, RETRAIN_STOPPED)
        assert not process_exists(trainer)
        with engine.connect() as conn:
            [(status, error)] = conn.execute(select(TrainingJob.status, TrainingJob.error)).all()
            runs = conn.execute(select(Run.status, Run.config)).all()
        assert status == "failed" and error.startswith("Terminated"), error
        assert list((tmp_path / "tmp").glob("sparring-job*")) == []
        assert [s for s, c in runs if c.get("purpose") == "retrain round 1"] == ["interrupted"]
    finally:
        engine.dispose()


def _job_running(engine: Engine) -> bool:
    with engine.connect() as conn:
        return conn.scalar(select(TrainingJob.id).where(TrainingJob.status == "running")) is not None


def _trainer_process(parent: int) -> int | None:
    """The pid of the trainer that ``parent`` spawned (``training.isolated``), if it runs now."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # ended while we looked
        if ppid == parent and b"spawn_main" in command:
            return int(stat.parent.name)
    return None


# --- concurrent writers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "processes"), [("sqlite", 4), pytest.param("postgres", 8, marks=pytest.mark.postgres)]
)
def test_concurrent_plays_lose_and_duplicate_nothing(
    backend: str, processes: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}" if backend == "sqlite" else request.getfixturevalue("postgres_url")
    env = _child_env(tmp_path, url)
    episodes = 300
    children = [Child.start([*PLAY, "-n", str(episodes), "--seed", str(1000 * i)], env, tmp_path / f"play{i}")
                for i in range(processes)]  # a fresh store: they also migrate it at once
    reports = []
    for child in children:
        code, out, err = child.finish()
        assert code == 0 and "locked" not in err, err
        reports.append(json.loads(out)[0])
    engine = open_store(url)
    try:
        with engine.connect() as conn:
            for i, report in enumerate(reports):
                run = Episode.run_id == report["run_id"]
                seeds = sorted(conn.scalars(select(Episode.seed).where(run)))
                turns = conn.scalar(select(func.count()).select_from(Turn).join(Episode).where(run))
                logged = conn.scalar(select(func.sum(Episode.num_turns)).where(run))
                assert report["episodes"] == report["succeeded"] == episodes
                assert seeds == [1000 * i + k for k in range(episodes)]  # episode k of process i: none lost or twice
                assert turns == logged == 2 * episodes  # the actor answers, the critic accepts
            assert conn.scalar(select(func.count()).select_from(Episode)) == processes * episodes
            assert set(conn.scalars(select(Run.status))) == {"finished"}
        _assert_succeeded_are_whole(engine)
    finally:
        engine.dispose()


# --- SIGKILL of train and deploy ----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random model with the bundled tokenizer, as SPARRING_MODEL."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def _assert_adapters_whole(engine: Engine, adapters_root: Path, base: Path) -> None:
    """Every registry row names a complete folder of its own; every published-looking folder
    (``role@vN``) is complete, registered or not; a role has at most one active version."""
    with engine.connect() as conn:
        rows = conn.execute(select(AdapterVersion.name, AdapterVersion.path, AdapterVersion.status)).all()
    for name, path, status in rows:
        assert Path(path) == adapters_root / name
        verify_folder(Path(path), base_model=str(base), status=status)
    folders = [p for p in adapters_root.iterdir() if NAME_PATTERN.fullmatch(p.name)] if adapters_root.exists() else []
    for folder in folders:
        verify_folder(folder, base_model=str(base))
    assert [status for _, _, status in rows].count("active") <= 1


@pytest.mark.slow  # four processes that import torch
def test_train_killed_while_publishing_leaves_whole_adapters_or_none(
    tiny_base: Path, tmp_path: Path, sums: Path
) -> None:
    """Killed when its adapter's temporary copy appears (half-copied), then when the copy's
    final name appears (renamed, maybe not yet registered): the two moments a publish could be
    seen half done. A kill during training is test_faults' test_a_killed_train_leaves_its_rows_to_the_next_one."""
    url, env = _store_with_actor_rows(tiny_base, tmp_path, sums)
    train = ["train", "sft", "--role", "actor", "--max-steps", "2", "--batch-size", "2", "--format", "json"]
    adapters = tmp_path / "data" / "stores" / store_key(url) / "adapters"
    engine = open_store(url)
    try:
        for attempt, moment in enumerate((_staged_copy, _new_version_folder)):
            before = _entries(adapters)
            child = Child.start(train, env, tmp_path / f"train{attempt}")
            child.wait_for(lambda: moment(adapters, before), f"{moment.__name__} in {adapters}", poll_s=0.002)
            child.kill()
            _assert_adapters_whole(engine, adapters, tiny_base)

        code, out, err = Child.start(train, env, tmp_path / "last").finish()
        assert code == 0, err
        published = json.loads(out)[0]
        _assert_adapters_whole(engine, adapters, tiny_base)
        with engine.connect() as conn:
            jobs = conn.execute(select(TrainingJob.status, TrainingJob.error, TrainingJob.adapter_version_id)
                                .order_by(TrainingJob.id)).all()
            names = list(conn.scalars(select(AdapterVersion.name).order_by(AdapterVersion.id)))
        assert published["adapter"] == names[-1] != "actor@v1"  # the killed publish's number is not reused
        # the next train marked them; a kill that lands after the renamed copy was registered and the
        # job recorded finds a job that succeeded, with its adapter: never one left running
        stale = ("failed", STALE_JOB_ERROR, None)
        assert jobs[0] == stale and jobs[2][:2] == ("succeeded", None)
        assert jobs[1] == stale or (jobs[1][:2] == ("succeeded", None) and jobs[1][2] is not None), jobs
        assert list((tmp_path / "tmp").glob("sparring-job*")) == []
    finally:
        engine.dispose()


def _store_with_actor_rows(tiny_base: Path, tmp_path: Path, sums: Path) -> tuple[str, dict[str, str]]:
    """A store whose 8 training episodes hold right actor answers logged as the tiny model's
    (scripted play, relabelled), so train and retrain have rows; its URL and a child env for it."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = _child_env(tmp_path, url, SPARRING_MODEL=str(tiny_base))
    play = ["play", "math-reflection", "-n", "8", "--turns", "1", "--tasks", str(sums), "--split", "train"]
    played = Child.start([*play, *SCRIPTED_SEATS], env, tmp_path / "play").finish()
    assert played[0] == 0, played[2]
    as_model_turns(url, "actor")
    return url, env


def _entries(folder: Path) -> set[str]:
    return {entry.name for entry in os.scandir(folder)} if folder.exists() else set()


def _staged_copy(adapters: Path, before: set[str]) -> bool:
    return any(name.startswith(TMP_PREFIX) for name in _entries(adapters) - before)


def _new_version_folder(adapters: Path, before: set[str]) -> bool:
    return any(NAME_PATTERN.fullmatch(name) for name in _entries(adapters) - before)


@pytest.mark.slow  # two deploy processes that import torch and load the tiny model
def test_deploy_killed_at_a_random_point_leaves_the_registry_whole(tiny_base: Path, tmp_path: Path, sums: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    env = _child_env(tmp_path, url, SPARRING_MODEL=str(tiny_base))
    adapters = tmp_path / "data" / "adapters"  # where _publish_candidates puts them
    engine = open_store(url)
    _publish_candidates(engine, tiny_base, tmp_path, seeds=(1, 2))
    deploy = ["deploy", "actor", "--tasks", str(sums), "--eval-tasks", "8", "--turns", "1", "--max-new-tokens", "32",
              "-c", "2", "--seat", "critic=scripted:always-correct", "--format", "json"]
    # The kill point is a random amount of gate progress, not of wall time: on a fast machine the whole gate can end
    # within a second, and the kill must land while its first run still has episodes to play.
    played = random.Random(14).randrange(0, 4)
    try:
        child = Child.start(deploy, env, tmp_path / "killed")
        child.wait_for(lambda: _gate_played(engine, played), f"its gate's episode {played}", poll_s=0.002)
        child.kill()
        _assert_adapters_whole(engine, adapters, tiny_base)
        with engine.connect() as conn:
            left = set(conn.scalars(select(Run.id).where(Run.status == "running")))
        assert left  # its gate runs: SIGKILL let nothing mark them

        code, out, err = Child.start(deploy, env, tmp_path / "last").finish()
        assert code == 0, err
        decided = json.loads(out)[0]
        assert decided["decision"] in ("promoted", "rejected")
        _assert_adapters_whole(engine, adapters, tiny_base)
        with engine.connect() as conn:
            statuses = dict(conn.execute(select(AdapterVersion.name, AdapterVersion.status)).all())
            runs = dict(conn.execute(select(Run.id, Run.status)).all())
            running = conn.scalar(select(func.count()).where(Episode.status == "running"))
        assert statuses[decided["candidate"]] == ("active" if decided["decision"] == "promoted" else "rejected")
        assert running == 0 and "running" not in runs.values()
        assert {runs[run_id] for run_id in left} == {"interrupted"}  # the next deploy marked them
    finally:
        engine.dispose()


def test_deploy_stopped_by_sigterm_marks_its_gate_runs_and_exits_143(tiny_base: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    [candidate] = _publish_candidates(engine, tiny_base, tmp_path, seeds=(1,))
    deploy = ["deploy", "actor", "--tasks", str(_task_file(tmp_path, 2000)), "--eval-tasks", "2000", "--turns", "1",
              "--max-new-tokens", "32", "-c", "2", "--seat", "critic=scripted:always-correct"]
    try:
        child = Child.start(deploy, _child_env(tmp_path, url, SPARRING_MODEL=str(tiny_base)), tmp_path / "deploy")
        child.wait_for(lambda: _gate_played(engine, 1), "its gate's first episode")
        _assert_stopped(child, engine, signal.SIGTERM, f"interrupted while deploying {candidate}: its unfinished "
                        "gate runs are marked interrupted")
        with engine.connect() as conn:
            assert conn.scalar(select(AdapterVersion.status)) == "candidate"  # neither promoted nor rejected
    finally:
        engine.dispose()


def _publish_candidates(engine: Engine, base: Path, folder: Path, seeds: tuple[int, ...]) -> list[str]:
    """Random LoRA adapters on ``base`` published as actor candidates (adapters under folder/data)."""
    model = AutoModelForCausalLM.from_pretrained(base)
    return [publish(engine, role="actor", trained_dir=save_random_lora(model, folder / f"trained{seed}", seed=seed),
                    adapters_root=folder / "data" / "adapters", base_model=str(base), trainer="sft", config={},
                    parent=None, dataset_snapshot_id=None, metrics={"loss": 1.0}).name
            for seed in seeds]


def _gate_played(engine: Engine, episodes: int) -> bool:
    """Whether a gate run is running and has finished at least ``episodes`` episodes."""
    with engine.connect() as conn:
        running = list(conn.scalars(select(Run.id).where(Run.status == "running")))
        if not running:
            return False
        done = conn.scalar(select(func.count()).select_from(Episode)
                           .where(Episode.run_id.in_(running), Episode.status != "running"))
        return done >= episodes
