"""The loop through the CLI on a tiny random model: play, build, train, promote, play again.

The actor is first a scripted calculator (so there are correct answers to learn from), then
the model with its freshly promoted adapter: the second play's actor turns must be served by
that adapter, and a rollback must bring the previous version back.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.image
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli import app
from storage.engine import open_store, store_key
from storage.models import DatasetSnapshot, Episode, Evaluation, Run, TrainingJob
from storage.queries import EpisodeFilter, iter_turns
from ctrl_c import default_sigint
from model_logs import as_model_turns
from tiny_model import save_tiny_model

runner = CliRunner()


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'loop.db'}")
    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(tmp_path / "tiny")))
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_play_train_promote_play_rollback(env, monkeypatch):
    tasks = env / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + {a + 3}?", "answer": f"#### {2 * a + 3}"}) + "\n"
                             for a in range(12)))
    cli("play", "math-reflection", "-n", "12", "--turns", "1", "--tasks", str(tasks), "--split", "train",
        "--format", "json", "--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct")
    as_model_turns(f"sqlite:///{env / 'loop.db'}", "actor")
    built = json.loads(cli("datasets", "build", "sft", "--role", "actor", "--format", "json"))[0]
    assert built["rows"] > 0

    trained = json.loads(cli("train", "sft", "--role", "actor", "--dataset", str(built["snapshot"]),
                             "--max-steps", "2", "--batch-size", "2", "--format", "json"))[0]
    assert trained["adapter"] == "actor@v1" and trained["parent"] is None
    listed = json.loads(cli("adapters", "list", "--format", "json"))
    assert [(a["name"], a["status"]) for a in listed] == [("actor@v1", "candidate")]
    gate = json.loads(cli("deploy", "actor", "--tasks", str(tasks), "--eval-tasks", "2", "--turns", "1",
                          "--max-new-tokens", "4", "--seat", "critic=scripted:always-correct", "--format", "json"))[0]
    assert gate["candidate"] == "actor@v1" and gate["baseline"] == "base"
    assert gate["decision"] == "promoted"  # both score the same on a random model; margin 0 lets it through

    summary = json.loads(cli("play", "math-reflection", "-n", "2", "--turns", "1", "--max-new-tokens", "4",
                             "--seat", "critic=scripted:always-correct", "--format", "json").splitlines()[-1])[0]
    assert summary["succeeded"] == 2
    engine = open_store(f"sqlite:///{env / 'loop.db'}")
    run_id = summary["run_id"]
    served = {t["served_by"] for t in iter_turns(engine, EpisodeFilter(run_id=run_id, seat="actor"))}
    assert served == {"actor@v1"}

    # a second round continues from the active version, and rollback restores it
    second = json.loads(cli("train", "sft", "--role", "actor", "--dataset", str(built["snapshot"]),
                            "--max-steps", "1", "--batch-size", "2", "--format", "json"))[0]
    assert second["adapter"] == "actor@v2" and second["parent"] == "actor@v1"
    cli("adapters", "promote", "actor@v2")
    cli("adapters", "rollback", "actor")
    active = json.loads(cli("adapters", "list", "--status", "active", "--format", "json"))
    assert [a["name"] for a in active] == ["actor@v1"]

    # another store sharing the data folder numbers its own versions, in a folder of its own
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{env / 'other.db'}")
    cli("play", "math-reflection", "-n", "12", "--turns", "1", "--tasks", str(tasks), "--split", "train",
        "--format", "json", "--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct")
    as_model_turns(f"sqlite:///{env / 'other.db'}", "actor")
    own = json.loads(cli("train", "sft", "--role", "actor", "--max-steps", "1", "--batch-size", "2",
                         "--format", "json"))[0]
    assert own["adapter"] == "actor@v1" and own["parent"] is None
    folders = {p.parent.parent.name for p in (env / "data" / "stores").glob("*/adapters/actor@v1")}
    assert folders == {store_key(f"sqlite:///{env / 'loop.db'}"), store_key(f"sqlite:///{env / 'other.db'}")}


def test_train_errors_are_clear(env):
    result = runner.invoke(app, ["train", "sft", "--role", "actor"])
    assert result.exit_code == 2 and "play" in result.output  # nothing logged yet: says to play first
    result = runner.invoke(app, ["train", "sft", "--role", "actor", "--beta", "0.1"])
    assert result.exit_code == 2 and "--beta does not apply to the sft trainer" in result.output
    result = runner.invoke(app, ["train", "dpo", "--role", "actor", "--rpo-alpha", "-1"])
    assert result.exit_code == 2 and "rpo_alpha" in result.output
    result = runner.invoke(app, ["train", "sft", "--role", "actor", "--dataset", "99"])
    assert result.exit_code == 2 and "no dataset snapshot 99" in result.output


def test_retrain_round_trains_gates_and_reports(env):
    tasks = env / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 5?", "answer": f"#### {a + 5}"}) + "\n"
                             for a in range(8)))
    # earlier logs with right answers and right verdicts, as a better policy would have left them
    cli("play", "math-reflection", "-n", "8", "--turns", "1", "--tasks", str(tasks), "--split", "train",
        "--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct")
    as_model_turns(f"sqlite:///{env / 'loop.db'}", "actor", "critic")
    few = cli("retrain", "--tasks", str(tasks), "--once", "--practice", "0", "--every-episodes", "2", "--samples", "2",
              "--eval-tasks", "2", "--turns", "1", "--max-new-tokens", "4", "--min-rows", "1000", "--no-report",
              "--format", "json")
    skipped = json.loads(few.strip().splitlines()[-1])
    assert [(r["status"], r["candidate"]) for r in skipped] == [("skipped", None)] * 2, skipped
    assert all("fewer than min_rows 1000" in r["detail"] and r["rows"] > 0 for r in skipped), skipped
    # the rows a skipped round did not train on are read again by the next round
    products = env / "products.jsonl"  # a guard set: both gates and the report play it too
    products.write_text("".join(json.dumps({"question": f"What is {a} * 3?", "answer": f"#### {a * 3}"}) + "\n"
                                for a in range(1, 5)))
    out = cli("retrain", "--tasks", str(tasks), "--once", "--practice", "0", "--min-rows", "1",
              "--every-episodes", "4", "--samples", "2", "--guard", str(products),
              "--eval-tasks", "2", "--turns", "1", "--max-new-tokens", "4", "--max-steps", "1", "--format", "json")
    rounds, report = (json.loads(line) for line in out.strip().splitlines()[-2:])
    assert [(r["round"], r["role"]) for r in rounds] == [(1, "actor"), (1, "critic")]
    assert all(r["status"] in ("promoted", "rejected") and r["rows"] > 0 for r in rounds), rounds
    assert {r["candidate"] for r in rounds} == {"actor@v1", "critic@v1"}
    assert [m["metric"] for m in report] == ["pass@turn-1", "pass@final-turn", "majority@N", "refinement_gain",
                                             "critic_balanced_accuracy", "critic_unparsed_rate"] * 2
    assert [m["set"] for m in report] == ["heldout"] * 6 + ["products.jsonl"] * 6
    assert all(set(m) == {"metric", "set", "family", "before", "round 1"} and m["before"]["n"] == 2
               and m["family"] is None for m in report), report  # files of one family: no family rows
    guarded = open_store(f"sqlite:///{env / 'loop.db'}")
    with guarded.connect() as conn:
        gates = conn.execute(select(Evaluation.metrics)).scalars().all()
    guarded.dispose()
    assert [set(g["guards"]) for g in gates] == [{"products.jsonl"}] * 2
    curve = matplotlib.image.imread(env / "loop-learning-curve.png")  # beside the store
    assert curve[..., :3].std() > 0.05

    # the next round reads only what is new. The tiny actor's own answers are wrong: no actor rows.
    # With --judge-rows own, its critic's verdict is a constrained choice, so each 'incorrect' on those
    # wrong answers is a right verdict: rows from this round's episodes only, trained and gated as
    # critic@v2 (truth rows, the default, need a right answer beside the wrong ones).
    engine = open_store(f"sqlite:///{env / 'loop.db'}")
    with engine.connect() as conn:
        earlier = set(conn.execute(select(Episode.id)).scalars())
    again = cli("retrain", "--tasks", str(tasks), "--once", "--practice", "0", "--min-rows", "1",
                "--every-episodes", "4", "--samples", "2",
                "--eval-tasks", "2", "--turns", "1", "--max-new-tokens", "4", "--max-steps", "1",
                "--judge-rows", "own", "--no-report", "--format", "json")
    actor, critic = json.loads(again.strip().splitlines()[-1])
    assert actor["status"] == "skipped" and "no new rows" in actor["detail"], actor
    assert critic["status"] in ("promoted", "rejected") and critic["candidate"] == "critic@v2", critic["detail"]
    with engine.connect() as conn:
        path = conn.execute(select(DatasetSnapshot.path).where(DatasetSnapshot.role == "critic")
                            .order_by(DatasetSnapshot.id.desc())).scalars().first()
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert len(rows) == critic["rows"] > 0
    assert all(r["reward"] >= 0.5 and r["episode_id"] not in earlier for r in rows), rows
    assert all(r["completion"][0]["content"].endswith("Verdict: incorrect") for r in rows), rows


def test_train_grpo_plays_the_game_and_publishes_a_candidate(env):
    tasks = env / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 2?", "answer": f"#### {a + 2}"}) + "\n"
                             for a in range(4)))
    trained = json.loads(cli("train", "grpo", "--role", "actor", "--tasks", str(tasks), "--max-steps", "1",
                             "--seat", "critic=scripted:always-correct", "--format", "json"))[0]
    assert trained["adapter"] == "actor@v1" and trained["dataset"] is None
    rollouts = json.loads(cli("episodes", "list", "--format", "json", "--limit", "100"))
    assert len(rollouts) == 8 and {r["status"] for r in rollouts} == {"succeeded"}  # one step: 8 generations


def test_every_minutes_ends_the_play_phase_early(env):
    out = cli("retrain", "--once", "--practice", "0", "--min-rows", "1", "--roles", "actor",
              "--every-episodes", "40", "--samples", "1", "-c", "4",
              "--every-minutes", "0.0001", "--eval-tasks", "2", "--turns", "1", "--max-new-tokens", "4",
              "--max-steps", "1", "--no-report", "--format", "json")
    rounds = json.loads(out.strip().splitlines()[-1])
    assert rounds[0]["episodes"] == 4  # the first one per concurrent slot always start; then time is up


def test_the_critic_learns_from_truth_verdicts_by_default(env):
    """--judge-rows left out: truth, for one round (the main job) as for several; what the command
    line names wins; each round's run records the rows it chose."""
    quick = ["--practice", "0", "--min-rows", "1", "--every-episodes", "1", "--samples", "1", "-c", "1",
             "--eval-tasks", "1", "--turns", "1", "--max-new-tokens", "2", "--max-steps", "1", "--no-report"]
    for options in (["--rounds", "2"], ["--once"], ["--rounds", "2", "--judge-rows", "own"]):
        result = runner.invoke(app, ["retrain", *options, *quick])
        assert result.exit_code == 0, result.output
        assert ("from the ground truth" in result.output) == ("own" not in options)
    with open_store(f"sqlite:///{env / 'loop.db'}").connect() as conn:
        configs = [c for c in conn.execute(select(Run.config).order_by(Run.started_at)).scalars()
                   if c["purpose"].startswith("retrain round")]
    assert [(c["purpose"], c["config"]["judge_rows"], c["config"]["judge_max_rows"]) for c in configs] == [
        ("retrain round 1", "truth", 140), ("retrain round 2", "truth", 140), ("retrain round 1", "truth", 140),
        ("retrain round 1", "own", 140), ("retrain round 2", "own", 140)]


def test_ctrl_c_during_retrain_keeps_what_was_committed(env):
    """A real SIGINT to a `sparring retrain` process while it plays: exit 130, the round's run
    marked interrupted, no episode left running, every episode committed before still there."""
    url = f"sqlite:///{env / 'loop.db'}"
    command = [sys.executable, "-m", "app.cli", "retrain", "--once", "--practice", "0", "--min-rows", "1",
               "--roles", "actor",
               "--every-episodes", "400",
               "--samples", "1", "-c", "2", "--turns", "3", "--max-new-tokens", "48", "--no-report",
               "--seat", "critic=scripted:always-incorrect"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONFAULTHANDLER": "1"}, preexec_fn=default_sigint)
    engine = open_store(url)
    try:
        before = _wait_for_episodes(engine, at_least=4, process=process)
        process.send_signal(signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            stacks, _ = process.communicate(timeout=30)
            pytest.fail(f"no exit 2 minutes after SIGINT; the process's stacks:\n{stacks[-6000:]}")
    finally:
        process.kill()
    assert process.returncode == 130, output
    assert "interrupted" in output
    with engine.connect() as conn:
        episodes = dict(conn.execute(select(Episode.id, Episode.status)).all())
        runs = conn.execute(select(Run.status)).scalars().all()
    assert before <= set(episodes) and "running" not in set(episodes.values())
    assert runs == ["interrupted"]


def test_ctrl_c_while_retrain_trains_stops_the_trainer_process_at_once(env):
    """SIGINT to the retrain process (not its trainer child) in the middle of a long training
    job: the child is terminated, the job is failed, the round's run is interrupted, exit 130."""
    tasks = env / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 5?", "answer": f"#### {a + 5}"}) + "\n"
                             for a in range(8)))
    cli("play", "math-reflection", "-n", "8", "--turns", "1", "--tasks", str(tasks), "--split", "train",
        "--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct")
    as_model_turns(f"sqlite:///{env / 'loop.db'}", "actor")
    command = [sys.executable, "-m", "app.cli", "retrain", "--once", "--practice", "0", "--min-rows", "1",
               "--roles", "actor",
               "--tasks", str(tasks),
               "--every-episodes", "2", "--samples", "1", "-c", "2", "--turns", "1", "--max-new-tokens", "4",
               "--max-steps", "100000", "--no-report", "--seat", "critic=scripted:always-correct"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=default_sigint)
    engine = open_store(f"sqlite:///{env / 'loop.db'}")
    try:
        trainer = _wait_for_training(engine, process)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, output
    with engine.connect() as conn:
        job = conn.execute(select(TrainingJob.status, TrainingJob.error)).one()
        runs = conn.execute(select(Run.status).order_by(Run.started_at)).scalars().all()
    assert job.status == "failed" and "KeyboardInterrupt" in job.error
    assert runs[-1] == "interrupted"
    with pytest.raises(ProcessLookupError):
        os.kill(trainer, 0)


def _wait_for_training(engine, process: subprocess.Popen) -> int:
    """The pid of the retrain process's trainer child, once its job has started."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        with engine.connect() as conn:
            running = conn.execute(select(TrainingJob.id).where(TrainingJob.status == "running")).first()
        trainers = [int(p.name) for p in Path("/proc").iterdir()
                    if p.name.isdigit() and _parent(p) == process.pid and b"spawn_main" in _cmdline(p)]
        if running and trainers:
            time.sleep(3)  # into the training itself
            return trainers[0]
        time.sleep(0.5)
    raise AssertionError("the retrain process started no training job in 5 minutes")


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _parent(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _wait_for_episodes(engine, *, at_least: int, process: subprocess.Popen) -> set[str]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        with engine.connect() as conn:
            done = set(conn.execute(select(Episode.id).where(Episode.status == "succeeded")).scalars())
        if len(done) >= at_least:
            return done
        time.sleep(0.5)
    raise AssertionError("the retrain process logged no episodes in 5 minutes")


def test_retrain_practice_gives_the_actor_solo_attempts_before_the_full_episodes(env):
    """--practice plays the actor alone first (one answer, the critic's seat a scripted stand-in that
    costs no model call), on fresh tasks of its own source; the full episodes follow."""
    tasks = env / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 1?", "answer": f"#### {a + 1}"}) + "\n"
                             for a in range(16)))
    out = cli("retrain", "--tasks", str(tasks), "--once", "--roles", "actor", "--practice", "6", "--min-rows", "1",
              "--practice-samples", "3", "--every-episodes", "4", "--samples", "2", "-c", "4", "--eval-tasks", "2",
              "--turns", "2", "--max-new-tokens", "4", "--max-steps", "1", "--no-report", "--format", "json")
    rounds = json.loads(out.strip().splitlines()[-1])
    assert rounds[0]["episodes"] == 10
    engine = open_store(f"sqlite:///{env / 'loop.db'}")
    with engine.connect() as conn:
        (round_run,) = conn.execute(select(Run.id, Run.config).where(
            Run.config["purpose"].as_string() == "retrain round 1"))
        episodes = list(conn.execute(select(Episode.id, Episode.task_id).where(Episode.run_id == round_run[0])))
    assert round_run[1]["config"]["refinements"] is True  # the default: sft trainer, a game that declares them
    turns = {}
    for turn in iter_turns(engine, EpisodeFilter(run_id=round_run[0])):
        turns.setdefault(turn["episode_id"], []).append(turn)
    solo = [e for e in episodes if [(t["seat"], t["backend"]) for t in turns[e.id]] ==
            [("actor", "inprocess"), ("critic", "scripted")]]
    assert len(solo) == 6  # 2 tasks x 3 attempts, each one model answer
    assert len({e.task_id for e in solo}) == 2
    full = [e for e in episodes if e not in solo]
    assert len(full) == 4 and all(t["backend"] == "inprocess" for e in full for t in turns[e.id])
    assert not {e.task_id for e in solo} & {e.task_id for e in full}  # fresh tasks for each phase


def test_retrain_refuses_held_out_sets_that_share_a_wording_with_training_before_playing(env):
    """A guard file whose rows were written from a template the training file uses too: its
    figure would not be template-held-out. Refused, naming the template, before any run."""
    def rows(path, template, offset):
        path.write_text("".join(json.dumps({"question": f"What is {a} + {offset}?", "answer": f"#### {a + offset}",
                                            "template": template, "family": "add"}) + "\n" for a in range(4)))
        return path
    tasks = rows(env / "train.jsonl", "what-is-sum", 5)
    guard = rows(env / "guard.jsonl", "what-is-sum", 7)
    result = runner.invoke(app, ["retrain", "--tasks", str(tasks), "--guard", str(guard), "--once", "--practice", "0",
                                 "--turns", "1"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert re.search(r"evaluation set guard.jsonl: template 'what-is-sum' \(task guard.jsonl:\d\) is in the training "
                     r"tasks too; .* drop those rows", message), message
    assert not (env / "loop.db").exists() or _runs(env) == 0
    rows(guard, "what-is-difference", 7)  # another wording: accepted (and the same file is its own held-out set)
    ok = runner.invoke(app, ["retrain", "--tasks", str(tasks), "--guard", str(guard), "--once", "--practice", "0",
                             "--turns", "1", "--every-episodes", "2", "--eval-tasks", "1", "--max-new-tokens", "2",
                             "--min-rows", "1000", "--no-report"])
    assert ok.exit_code == 0, ok.output


def _runs(env) -> int:
    engine = open_store(f"sqlite:///{env / 'loop.db'}")
    with engine.connect() as conn:
        count = conn.scalar(select(func.count()).select_from(Run))
    engine.dispose()
    return count


@pytest.mark.parametrize(("args", "message"), [
    (["--trainer", "ppo"], "SPARRING_TRAIN_PROCESSES=2: the ppo trainer trains in one process; sft, dpo, kto, reward "
                           "train in several"),
    (["--config", "odd.yaml"], "SPARRING_TRAIN_PROCESSES=2: an optimiser step of 3 x 1 rows"),
], ids=["ppo", "odd-batch"])
def test_retrain_refuses_data_parallel_training_it_cannot_share_before_playing(env, monkeypatch, args, message):
    monkeypatch.setenv("SPARRING_TRAIN_PROCESSES", "2")
    (env / "odd.yaml").write_text("train:\n  per_device_train_batch_size: 3\n")
    result = runner.invoke(app, ["retrain", "--once", *[str(env / a) if a.endswith(".yaml") else a for a in args]])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (env / "loop.db").exists() or _runs(env) == 0
