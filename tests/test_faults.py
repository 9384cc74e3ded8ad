"""Faults and bad input that used to do harm: each one here on real stores (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from ctrl_c import default_sigint
from factories import T0, episode_end, episode_start, record_episode, run_record, turn_record
from model_logs import as_model_turns
from sqlalchemy import Engine, insert, select
from tiny_model import save_random_lora, save_tiny_model
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from app.cli import app
from graphs.policies.adapter_folder import AdapterFolderError
from storage.engine import open_store
from storage.models import Episode, Run, TrainingJob
from storage.orphans import INTERRUPTED_STAGE
from storage.queries import get_episode
from storage.recorder import Recorder
from storage.rows import UNSTORED_STAGE
from storage.storable import REPLACED_KEY, REPLACEMENT
from training.adapter_folders import verify_folder
from training.jobs import JOB_FOLDER_PREFIX, OWNER_FILE, STALE_JOB_ERROR, store_id
from training.registry import AdapterRecord, publish

runner = CliRunner()
SCRIPTED_SEATS = ["--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct"]


def _is_postgres(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


# --- text the store cannot hold, and records it refuses ------------------------------------


def test_a_nul_character_is_stored_or_made_storable_and_marked(store: Engine) -> None:
    with Recorder(store, flush_interval_s=10) as recorder:  # one batch: the NUL episode amid others
        before = record_episode(recorder, turns=2)
        start = episode_start(task={"question": "What is 2\x00+ 3?", "answer": "5"})
        recorder.episode_started(start)
        recorder.turn(turn_record(start.id, 0, response="5\x00"))
        recorder.episode_finished(episode_end(start.id, num_turns=1))
        after = record_episode(recorder, turns=2)
    assert recorder.stats.lost_episodes == 0 and recorder.stats.dropped == 0
    assert [get_episode(store, ep.start.id)["status"] for ep in (before, after)] == ["succeeded"] * 2
    got = get_episode(store, start.id)
    assert got["status"] == "succeeded" and len(got["turns"]) == 1
    if _is_postgres(store):  # PostgreSQL refuses NUL in text: replaced, and the records say so
        assert got["task"] == {"question": f"What is 2{REPLACEMENT}+ 3?", "answer": "5", REPLACED_KEY: 1}
        assert got["turns"][0]["response"] == f"5{REPLACEMENT}"
        assert got["turns"][0]["sampling"][REPLACED_KEY] == 1
    else:  # SQLite holds it as sent
        assert got["task"] == start.task and got["turns"][0]["response"] == "5\x00"


def test_an_episode_whose_records_are_refused_fails_alone(store: Engine) -> None:
    with Recorder(store, flush_interval_s=10) as recorder:
        before = record_episode(recorder, turns=2)
        start = episode_start()
        recorder.episode_started(start)
        recorder.turn(turn_record(start.id, 0))
        recorder.turn(turn_record(start.id, 1, sampling={"stop": {"a set is no JSON"}}))
        recorder.episode_finished(episode_end(start.id))
        after = record_episode(recorder, turns=2)
        recorder.flush()
        recorder.turn(turn_record(start.id, 2))  # a later record of the refused episode is dropped
        later = record_episode(recorder, turns=1)
    assert recorder.stats.lost_episodes == 1 and recorder.stats.dropped == 5
    for ep in (before, after, later):
        got = get_episode(store, ep.start.id)
        assert got["status"] == "succeeded" and len(got["turns"]) == len(ep.turns)
    refused = get_episode(store, start.id)
    assert (refused["status"], refused["error_stage"], refused["turns"]) == ("failed", UNSTORED_STAGE, [])
    assert "refused" in refused["error"] and "JSON serializable" in refused["error"]
    assert refused["task"] == start.task  # the task itself was storable


def test_play_keeps_every_episode_of_a_task_file_with_a_nul(store_url: str, tmp_path, monkeypatch) -> None:
    """The reported loss: a NUL in one question made PostgreSQL refuse a batch, and the writer
    then saved nothing more. Echoed by the actor, the NUL reaches the turns too."""
    questions = [f"What is {a} + 1?" for a in range(40)]
    questions[20] = "What is 20\x00 + 1?"
    tasks = tmp_path / "nul.jsonl"
    tasks.write_text("".join(json.dumps({"question": q, "answer": f"#### {a + 1}"}) + "\n"
                             for a, q in enumerate(questions)))
    monkeypatch.setenv("SPARRING_DATABASE_URL", store_url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    result = runner.invoke(app, ["play", "math-reflection", "--tasks", str(tasks), "-n", "40", "-c", "4",
                                 "--turns", "1", "--seat", "actor=scripted:echo",
                                 "--seat", "critic=scripted:always-correct", "--format", "json"])
    assert result.exit_code == 0, result.output
    engine = open_store(store_url)
    with engine.connect() as conn:
        statuses = dict(conn.execute(select(Episode.id, Episode.status)).all())
        runs = conn.execute(select(Run.status)).scalars().all()
    episodes = [get_episode(engine, episode_id) for episode_id in statuses]
    engine.dispose()
    assert len(statuses) == 40 and set(statuses.values()) == {"succeeded"}, statuses
    assert runs == ["finished"]
    # PostgreSQL's JSON holds an escaped NUL, its text columns none: a NUL in a batch it refused is replaced
    nul = next(e for e in episodes if e["task"]["question"].replace(REPLACEMENT, "\x00") == questions[20])
    assert len(nul["turns"]) == 2 and "20" in nul["turns"][0]["response"]
    if REPLACEMENT in nul["task"]["question"]:
        assert _is_postgres(engine) and nul["task"][REPLACED_KEY] == 1


# --- a bad candidate -----------------------------------------------------------------------


@pytest.fixture
def tiny_env(tmp_path, monkeypatch) -> Path:
    """A SQLite store and the tiny random model as the base model, for CLI runs; temporary
    folders (training jobs') in a folder of the test's own, here and in child processes."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'store.db'}")
    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(tmp_path / "tiny")))
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _publish_candidates(env: Path, count: int, role: str = "actor") -> list[AdapterRecord]:
    base = str(env / "tiny")
    model = AutoModelForCausalLM.from_pretrained(base)
    model.config.name_or_path = base
    engine = open_store(f"sqlite:///{env / 'store.db'}")
    published = [
        publish(engine, role=role, trained_dir=save_random_lora(model, env / f"trained{i}", seed=i),
                adapters_root=env / "data" / "adapters", base_model=base, trainer="sft", config={}, parent=None,
                dataset_snapshot_id=None, metrics={"loss": 1.0})
        for i in range(count)
    ]
    engine.dispose()
    return published


def _sums(env: Path) -> Path:
    path = env / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {a} + 7?", "answer": f"#### {a + 7}"}) + "\n"
                            for a in range(4)))
    return path


def test_a_broken_candidate_neither_blocks_deploys_nor_prints_a_traceback(tiny_env: Path) -> None:
    older, newer = _publish_candidates(tiny_env, 2)
    (older.path / "adapter_model.safetensors").write_bytes(b"truncated")
    deploy = ["deploy", "actor", "--tasks", str(_sums(tiny_env)), "--eval-tasks", "2", "--turns", "1",
              "--max-new-tokens", "4", "--seat", "critic=scripted:always-correct", "--format", "json"]

    broken = runner.invoke(app, [*deploy, "--candidate", older.name])
    assert broken.exit_code == 1 and isinstance(broken.exception, SystemExit), broken.output
    message = " ".join(broken.output.split("error: ", 1)[1].split())  # one message, wrapped at 80 columns
    assert "Traceback" not in broken.output
    assert message.startswith(f"cannot deploy {older.name}: adapter {older.name}: adapter_model.safetensors")
    assert message.rstrip(".").endswith(f"`sparring adapters reject {older.name}`"), message
    assert "rollback" not in message and message.count("adapters reject") == 1  # a candidate is set aside

    newest = runner.invoke(app, deploy)  # the newest candidate, not the broken older one
    assert newest.exit_code == 0, newest.output
    assert json.loads(newest.stdout)[0]["candidate"] == newer.name

    rejected = runner.invoke(app, ["adapters", "reject", older.name])
    assert rejected.exit_code == 0, rejected.output
    listed = json.loads(runner.invoke(app, ["adapters", "list", "--format", "json"]).stdout)
    assert {a["name"]: a["status"] for a in listed}[older.name] == "rejected"
    again = runner.invoke(app, ["adapters", "reject", older.name])
    assert again.exit_code == 2 and "rejected → rejected is not allowed" in again.output
    nothing = runner.invoke(app, deploy)
    assert nothing.exit_code == 2 and "no candidate version" in nothing.output


@pytest.mark.parametrize(("status", "advice"), [
    ("candidate", ["set the candidate aside: `sparring adapters reject actor@v1`"]),
    ("active", ["go back to the previous version: `sparring adapters rollback actor`"]),
    (None, ["if it is a candidate, set the candidate aside: `sparring adapters reject actor@v1`",
            "if it is the active version, go back to the previous version: `sparring adapters rollback actor`"]),
    ("retired", []),
])
def test_a_broken_folder_is_given_the_advice_of_its_status(tiny_env: Path, status: str | None, advice: list[str]):
    [published] = _publish_candidates(tiny_env, 1)
    (published.path / "adapter_model.safetensors").write_bytes(b"truncated")
    with pytest.raises(AdapterFolderError) as raised:
        verify_folder(published.path, base_model=published.base_model, status=status)
    message = str(raised.value)
    assert f"Restore {published.path} from a backup" in message
    for fix in advice:
        assert fix in message
    assert message.count("sparring adapters") == len(advice)


# --- a killed train ------------------------------------------------------------------------


def _played_for_training(env: Path) -> str:
    """A store with 8 right actor answers logged as the base model's; returns its URL."""
    url = f"sqlite:///{env / 'store.db'}"
    tasks = env / "train.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 5?", "answer": f"#### {a + 5}"}) + "\n"
                             for a in range(8)))
    played = runner.invoke(app, ["play", "math-reflection", "-n", "8", "--turns", "1", "--tasks", str(tasks),
                                 "--split", "train", "--seat", "actor=scripted:calculator",
                                 "--seat", "critic=scripted:always-correct"])
    assert played.exit_code == 0, played.output
    as_model_turns(url, "actor")
    return url


def _start_and_wait_for_training(command: list[str], url: str) -> subprocess.Popen:
    """Start a sparring command in a child process; return once its training job is under way."""
    process = subprocess.Popen([sys.executable, "-m", "app.cli", *command], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, preexec_fn=default_sigint)
    engine = open_store(url)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            assert process.poll() is None, process.communicate()[0]
            with engine.connect() as conn:
                if conn.execute(select(TrainingJob.id).where(TrainingJob.status == "running")).first():
                    time.sleep(3)  # into the training itself
                    return process
            time.sleep(0.3)
    finally:
        engine.dispose()
    process.kill()
    raise AssertionError("no training job started within 4 minutes")


def _cli_json(*args: str) -> list[dict]:
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_killed_train_leaves_its_rows_to_the_next_one(tiny_env: Path) -> None:
    url = _played_for_training(tiny_env)
    killed = _start_and_wait_for_training(["train", "sft", "--role", "actor", "--max-steps", "100000"], url)
    killed.kill()
    killed.wait(timeout=30)
    [unfinished] = _cli_json("datasets", "list")
    assert unfinished["settled"] is False and unfinished["rows"] == 8, unfinished
    assert [j["status"] for j in unfinished["jobs"]] == ["running"]  # SIGKILL: nothing could mark it
    assert len(list((tiny_env / "tmp").glob("sparring-job*"))) == 1

    trained = _cli_json("train", "sft", "--role", "actor", "--max-steps", "1", "--batch-size", "2")[0]
    # the next command that starts work marks the dead process's job and removes its folder
    assert _job_statuses(url) == [("failed", STALE_JOB_ERROR), ("succeeded", None)]
    assert list((tiny_env / "tmp").glob("sparring-job*")) == []
    assert trained["rows"] == 8 and trained["dataset"] != unfinished["snapshot"]  # the same rows, read again
    newest, _ = _cli_json("datasets", "list")
    assert newest["snapshot"] == trained["dataset"] and newest["settled"] is True
    assert [j["status"] for j in newest["jobs"]] == ["succeeded"]
    nothing_new = runner.invoke(app, ["train", "sft", "--role", "actor", "--max-steps", "1"])
    assert nothing_new.exit_code == 2 and "no new rows" in nothing_new.output  # the finished job moved it on


def _job_statuses(url: str) -> list[tuple[str, str | None]]:
    engine = open_store(url)
    with engine.connect() as conn:
        jobs = conn.execute(select(TrainingJob.status, TrainingJob.error).order_by(TrainingJob.id)).all()
    engine.dispose()
    return [tuple(job) for job in jobs]


def test_sigterm_stops_train_like_ctrl_c(tiny_env: Path) -> None:
    url = _played_for_training(tiny_env)
    training = _start_and_wait_for_training(["train", "sft", "--role", "actor", "--max-steps", "100000"], url)
    training.send_signal(signal.SIGTERM)
    output, _ = training.communicate(timeout=60)
    assert training.returncode == 143, output  # was killed by the signal (-15) with the job left running
    assert "interrupted" in output and "Traceback" not in output
    [(status, error)] = _job_statuses(url)
    assert status == "failed" and error.startswith("Terminated"), error
    assert list((tiny_env / "tmp").glob("sparring-job*")) == []


def _dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


@dataclass(frozen=True)
class StaleWork:
    run_id: str
    episode_id: str
    job_id: int
    job_folder: Path


def _leave_stale_work(url: str) -> StaleWork:
    """What a process of this host killed outright leaves: its run and an episode ``running``, a
    training job ``running`` with its temporary folder (as ``run_training_job`` writes it)."""
    pid, engine = _dead_pid(), open_store(url)
    try:
        run = run_record(pid=pid)
        episode = episode_start(run_id=run.id)
        with Recorder(engine) as recorder:
            recorder.start_run(run)
            recorder.episode_started(episode)
        with engine.begin() as conn:
            job_id = conn.execute(insert(TrainingJob).values(
                kind="sft", role="actor", status="running", config={}, started_at=T0).returning(TrainingJob.id)
            ).scalar_one()
        folder = Path(tempfile.mkdtemp(prefix=f"{JOB_FOLDER_PREFIX}{job_id}-"))
        owner = {"job": job_id, "store": store_id(engine), "host": socket.gethostname(), "pid": pid}
        (folder / OWNER_FILE).write_text(json.dumps(owner))
    finally:
        engine.dispose()
    return StaleWork(run.id, episode.id, job_id, folder)


def _assert_stale_work_marked(url: str, stale: StaleWork, output: str) -> None:
    assert ("marked as failed what stopped processes left running: 1 episode(s), 1 training job(s)"
            in " ".join(output.split())), output
    engine = open_store(url)
    with engine.connect() as conn:
        run_status = conn.scalar(select(Run.status).where(Run.id == stale.run_id))
        episode = conn.execute(select(Episode.status, Episode.error_stage).where(Episode.id == stale.episode_id)).one()
        job = conn.execute(select(TrainingJob.status, TrainingJob.error).where(TrainingJob.id == stale.job_id)).one()
    engine.dispose()
    assert run_status == "interrupted"
    assert tuple(episode) == ("failed", INTERRUPTED_STAGE)
    assert tuple(job) == ("failed", STALE_JOB_ERROR)
    assert not stale.job_folder.exists()


def test_eval_marks_what_dead_processes_left_running_before_it_starts(tiny_env: Path) -> None:
    url = f"sqlite:///{tiny_env / 'store.db'}"
    stale = _leave_stale_work(url)
    evaluated = runner.invoke(app, ["eval", "--tasks", str(_sums(tiny_env)), "-n", "2", *SCRIPTED_SEATS])
    assert evaluated.exit_code == 0, evaluated.output
    _assert_stale_work_marked(url, stale, evaluated.output)


def test_retrain_marks_what_dead_processes_left_running_before_it_starts(tiny_env: Path) -> None:
    """A round whose learner seats are scripted (nothing to train; the tiny model loads for its gates)."""
    url = f"sqlite:///{tiny_env / 'store.db'}"
    stale = _leave_stale_work(url)
    retrained = runner.invoke(app, ["retrain", "--practice", "0", "--no-report", "--every-episodes", "2", "--samples",
                                    "1", "--eval-tasks", "2", "-c", "2", *SCRIPTED_SEATS])
    assert retrained.exit_code == 0, retrained.output
    _assert_stale_work_marked(url, stale, retrained.output)


# --- crashes and unclear errors -----------------------------------------------------------


def _sparring(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`sparring ARGS` in a child process, as a user starts it (its console set up at start-up)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    environ.update(SPARRING_DATABASE_URL=f"sqlite:///{cwd / 'store.db'}", SPARRING_DATA_DIR=str(cwd / "data"), **env)
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=cwd, env=environ, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("seats", ["{x", "[1]"])
def test_invalid_seats_json_is_one_line_naming_the_variable_and_its_shape(tmp_path: Path, seats: str) -> None:
    for command in (["settings"], ["episodes", "list"], ["play", "math-reflection", "-n", "1"], ["games"]):
        done = _sparring(*command, cwd=tmp_path, SPARRING_SEATS=seats)
        assert "Traceback" not in done.stderr, (command, done.stderr)
        if command != ["games"]:  # games reads no settings
            message = " ".join(done.stderr.split())
            assert done.returncode == 2, (command, done.stderr)
            assert "SPARRING_SEATS" in message
            assert 'expected a JSON object of seat to policy, e.g. {"critic": ' in message


def test_a_misspelt_setting_is_warned_about_with_the_name_it_misspells(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SPARRING_DATABSE_URL=sqlite:///elsewhere.db\nexport SPARRING_MODLE=x\n")
    done = _sparring("episodes", "list", cwd=tmp_path, SPARRING_DEVCE="cpu", SPARRING_GAMES="",
                     SPARRING_API_TOKEN="t" * 16, SPARRING_TEST_POSTGRES_URL="postgresql://x@h/db")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert sorted(warnings) == [
        "warning: SPARRING_DATABSE_URL (in .env) is not a sparring setting and is ignored; did you mean "
        "SPARRING_DATABASE_URL? (`sparring settings` lists them)",
        "warning: SPARRING_DEVCE (in the environment) is not a sparring setting and is ignored; did you mean "
        "SPARRING_DEVICE? (`sparring settings` lists them)",
        "warning: SPARRING_MODLE (in .env) is not a sparring setting and is ignored; did you mean SPARRING_MODEL? "
        "(`sparring settings` lists them)",
    ]  # once each, although the settings are read several times; the variables read elsewhere are known


def _as_another_user() -> list[str]:
    """A command prefix that runs as nobody when the tests run as root, who writes read-only files."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): cannot run a command as another user")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_play_on_a_read_only_sqlite_file_is_one_line_saying_how_to_fix_it() -> None:
    folder = Path(tempfile.mkdtemp(prefix="sparring-ro-", dir="/tmp"))  # nobody can reach it
    try:
        folder.chmod(0o777)
        store = folder / "store.db"
        open_store(f"sqlite:///{store}").dispose()
        store.chmod(0o444)
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
        environ.update(SPARRING_DATABASE_URL=f"sqlite:///{store}", SPARRING_DATA_DIR=str(folder / "data"),
                       HOME=str(folder), PYTHONDONTWRITEBYTECODE="1")

        def sparring(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([*_as_another_user(), sys.executable, "-m", "app.cli", *args], cwd=folder,
                                  env=environ, text=True, capture_output=True, timeout=120)

        played = sparring("play", "math-reflection", "-n", "1", "--seat", "actor=scripted:echo",
                          "--seat", "critic=scripted:always-correct")
        listed = sparring("episodes", "list")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert played.returncode == 2 and "Traceback" not in played.stderr, played.stderr
    assert " ".join(played.stderr.split()) == (
        f"error: the SQLite store {store} is read-only: make it writable (chmod u+w {store}) or log elsewhere "
        "with --db sqlite:///other.db")
    assert listed.returncode == 0, listed.stderr  # reading it still works


def test_a_lora_rank_mismatch_is_one_line_naming_the_adapter_and_the_shapes(tmp_path: Path) -> None:
    import asyncio

    from tiny_model import tiny_model, tiny_tokenizer

    from graphs.policies.base import BackendError
    from graphs.policies.inprocess import InProcessBackend

    tokenizer = tiny_tokenizer()
    folder = save_random_lora(tiny_model(tokenizer), tmp_path / "actor@v1", seed=1)  # trained with r=4
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "r": 8}))
    backend = InProcessBackend(tiny_model(tokenizer), tokenizer, model_name="tiny", batch_wait_s=0.05)
    try:
        with pytest.raises(BackendError) as raised:
            asyncio.run(backend.load_adapter("actor@v1", str(folder)))
        assert backend.adapters() == []
    finally:
        asyncio.run(backend.aclose())
    message = str(raised.value)
    assert "\n" not in message and len(message) < 1000, message  # PyTorch's own text lists all 8 tensors
    assert message.startswith(f"could not load adapter folder {folder} as 'actor@v1' on tiny: 8 tensor(s) ")
    assert "adapter_config.json (r=8)" in message
    assert "q_proj.lora_A.actor@v1.weight: expected [8, 64], found [4, 64]" in message
    assert raised.value.__cause__ is None  # nor does a traceback print it


def test_a_parent_adapters_rank_mismatch_in_training_is_one_line_naming_the_shapes(tmp_path: Path) -> None:
    from tiny_model import tiny_model, tiny_tokenizer

    from training.trainers.errors import AdapterMismatchError
    from training.trainers.lora import LoraSettings, attach_adapter

    tokenizer = tiny_tokenizer()
    folder = save_random_lora(tiny_model(tokenizer), tmp_path / "parent", seed=1)  # trained with r=4
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "r": 8}))
    with pytest.raises(AdapterMismatchError) as raised:
        attach_adapter(tiny_model(tokenizer), LoraSettings(), folder)
    message = str(raised.value)
    assert "\n" not in message and len(message) < 1000, message
    assert message.startswith(f"The parent adapter in {folder} does not fit the base model: ")
    assert "adapter_config.json (r=8)" in message
    assert "expected [8, 64], found [4, 64]" in message
    assert raised.value.__cause__ is None
