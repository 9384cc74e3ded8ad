"""`sparring play --ray` and `sparring eval --ray` on a real local Ray cluster (a head and a
second node started on loopback) writing to a real PostgreSQL database.

The CLI runs as a subprocess with scripted seats, so no model loads; a Ray worker is killed by
the pid its run records, as a user's `kill` would. One cluster serves the whole module; its
nodes are stopped (and `ray stop` run) at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from app.cli import app
from app.playing import INTERRUPTED, PlayJob
from ctrl_c import default_sigint
from graphs.tasks import load_tasks
from process_groups import stop_group
from storage.engine import open_store
from storage.models import Episode, EpisodePayload, Run
from storage.orphans import process_exists
from storage.queries import count_episodes_by_status
from tiny_model import save_tiny_model

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
SCRIPTED = ["--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct"]
NODE = ["--num-cpus", "1", "--object-store-memory", str(100 * 2**20), "--node-ip-address", "127.0.0.1",
        "--disable-usage-stats", "--block"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_node(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A node of the test cluster; its raylet waits up to 2 minutes for its agents (a loaded machine
    starts them slowly; Ray's default gives up and crashes)."""
    env = {**(os.environ if env is None else env), "RAY_agent_register_timeout_ms": "120000"}
    return subprocess.Popen(["nice", "-n", "19", RAY, "start", *args, *NODE], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _wait_for_cpus(address: str, cpus: int, node: subprocess.Popen[bytes] | None = None, timeout: float = 300) -> None:
    """Wait until the cluster has ``cpus`` CPUs; raises ``_NodeExited`` if ``node`` (the one
    joining) ends first, AssertionError with the cluster's last status after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    said = ""
    while time.monotonic() < deadline:
        said = subprocess.run([RAY, "status", "--address", address], capture_output=True, text=True).stdout
        if f"/{cpus}.0 CPU" in said:
            return
        if node is not None and node.poll() is not None:
            raise _NodeExited(f"`ray start` exited with {node.returncode} before its node joined")
        time.sleep(0.5)
    raise AssertionError(f"the Ray cluster at {address} never had {cpus} CPUs; `ray status` said:\n{said}")


class _NodeExited(Exception):
    pass


def _add_node(address: str, cpus: int, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a node of ``address``'s cluster and wait until the cluster has ``cpus`` CPUs. A node
    whose `ray start` gives up on a loaded machine (its agents registered too late) is started
    once more; a second failure fails the test."""
    try:
        return _joined(address, cpus, args, env)
    except _NodeExited:
        return _joined(address, cpus, args, env)


def _joined(address: str, cpus: int, args: tuple[str, ...], env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    node = _start_node("--address", address, "--dashboard-agent-listen-port", "0", *args, env=env)
    try:
        _wait_for_cpus(address, cpus, node)
    except BaseException:
        stop_group(node, grace_s=5)
        raise
    return node


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """The address of a two-node Ray cluster on loopback: a head and a second node, 1 CPU each."""
    address = f"127.0.0.1:{_free_port()}"
    nodes = [_start_node("--head", "--port", address.split(":")[1], "--include-dashboard=false")]
    try:
        _wait_for_cpus(address, 1, nodes[0])
        nodes.append(_add_node(address, 2))
        yield address
    finally:
        subprocess.run([RAY, "stop", "--force"], capture_output=True)
        for node in nodes:
            stop_group(node, grace_s=5)  # `ray start --block` and its session


def _env(url: str, tmp_path: Path, **more: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    environ.update({"SPARRING_DATABASE_URL": url, "SPARRING_DATA_DIR": str(tmp_path / "data"),
                    "SPARRING_RAY_WORKER_CPUS": "0.5", **more})  # 2 CPUs: 4 workers at once
    return environ


def _sparring(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args, "-f", "json"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)


def _finish(process: subprocess.Popen[str], timeout: float = 180) -> tuple[int, Any, str]:
    stdout, stderr = process.communicate(timeout=timeout)
    lines = stdout.strip().splitlines()
    return process.returncode, json.loads(lines[-1]) if lines else None, stderr


def _runs(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(Run).order_by(Run.started_at)))


def _episodes(engine: Engine) -> list[Any]:
    query = select(Episode.run_id, Episode.task_id, Episode.seed, Episode.status, EpisodePayload.error).join(
        EpisodePayload, EpisodePayload.episode_id == Episode.id)
    with engine.connect() as conn:
        return list(conn.execute(query))


def _worker_run(engine: Engine, worker: int, timeout: float = 120) -> Any:
    """The run of Ray worker ``worker`` once the store shows it with finished and running episodes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in _runs(engine) if r.parent_id and r.config["worker"] == worker]
        if runs and {"succeeded", "running"} <= set(count_episodes_by_status(engine, runs[0].id)):
            return runs[0]
        time.sleep(0.01)
    raise AssertionError(f"ray worker {worker} never had running episodes in the store")


def test_ray_workers_play_every_episode_once(cluster: str, postgres_url: str, tmp_path: Path) -> None:
    """Three workers on two nodes: each episode exactly once, with the task and seed one process gives it."""
    n, seed = 90, 5
    code, summary, stderr = _finish(_sparring(_env(postgres_url, tmp_path), "play", "math-reflection", *SCRIPTED,
                                              "-n", str(n), "-c", "4", "--seed", str(seed), "--workers", "3",
                                              "--ray", cluster))
    assert code == 0, stderr
    assert (summary[0]["episodes"], summary[0]["succeeded"], summary[0]["workers"]) == (n, n, 3)
    engine = open_store(postgres_url)
    parent, *children = _runs(engine)
    assert parent.status == "finished" and parent.config["ray"] == cluster
    assert len(children) == 3 and {(c.parent_id, c.status) for c in children} == {(parent.id, "finished")}
    tasks = load_tasks("arithmetic", n=n, seed=seed, split="train")
    assert sorted((e.task_id, e.seed) for e in _episodes(engine)) == sorted((t.id, seed + i) for i, t in
                                                                            enumerate(tasks))
    engine.dispose()


def test_a_killed_ray_worker_has_its_unfinished_episodes_replayed(cluster: str, postgres_url: str,
                                                                   tmp_path: Path) -> None:
    n, seed = 400, 3
    engine = open_store(postgres_url)
    process = _sparring(_env(postgres_url, tmp_path), "play", "math-reflection", *SCRIPTED, "-n", str(n), "-c", "4",
                        "--seed", str(seed), "--workers", "2", "--ray", cluster)
    victim = _worker_run(engine, worker=1)
    os.kill(victim.pid, signal.SIGSTOP)
    cut = count_episodes_by_status(engine, victim.id).get("running", 0)
    os.kill(victim.pid, signal.SIGKILL)
    code, summary, stderr = _finish(process)

    assert code == 0, stderr
    said = " ".join(stderr.split())
    assert "ray worker 1" in said and "The unfinished episodes were played again" in said
    by_id = {r.id: r for r in _runs(engine)}
    assert by_id[victim.id].status == "failed" and "ray worker 1" in by_id[victim.id].summary["error"]
    victim_done = count_episodes_by_status(engine, victim.id).get("succeeded", 0)
    replays = [r for r in by_id.values() if r.config.get("attempt") == 1]
    assert replays and {r.status for r in replays} == {"finished"}
    assert summary[0]["replayed"] == victim.config["episodes"] - victim_done == sum(r.config["episodes"]
                                                                                     for r in replays)
    episodes = _episodes(engine)
    succeeded = Counter(e.seed for e in episodes if e.status == "succeeded")
    assert succeeded == Counter(range(seed, seed + n))  # every episode once: none lost, none twice
    failed = [e for e in episodes if e.status != "succeeded"]
    assert cut > 0 and len(failed) == cut == summary[0]["failed"]  # exactly those it was playing when killed
    assert all(e.run_id == victim.id and e.error.startswith("interrupted: ray worker 1 (") for e in failed)
    assert len(episodes) == n + cut
    engine.dispose()


def _kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` at once (a node's raylet puts its workers in
    process groups of their own, inside the node's session)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_node_that_dies_has_its_workers_episodes_played_on_the_others(cluster: str, postgres_url: str,
                                                                       tmp_path: Path) -> None:
    """A third node joins, takes one of three workers (1 CPU each, so one per node) and dies whole:
    its raylet, agents and worker killed at once, as a machine that loses power. The share is
    played on the nodes left, and the cluster goes on with them."""
    node = _add_node(cluster, 3)
    try:
        n, seed = 600, 11
        engine = open_store(postgres_url)
        process = _sparring(_env(postgres_url, tmp_path, SPARRING_RAY_WORKER_CPUS="1"), "play", "math-reflection",
                            *SCRIPTED, "-n", str(n), "-c", "4", "--seed", str(seed), "--workers", "3", "--ray",
                            cluster)
        workers = [_worker_run(engine, worker=k) for k in range(3)]
        on_node = [w for w in workers if os.getsid(w.pid) == node.pid]  # the node's processes share its session
        assert len(on_node) == 1, "each node should hold one worker"
        _kill_session(node.pid)
        code, summary, stderr = _finish(process)
    finally:
        stop_group(node, grace_s=5)
    victim = on_node[0]

    assert code == 0, stderr
    said = " ".join(stderr.split())
    assert f"ray worker {victim.config['worker']}" in said and "The unfinished episodes were played again" in said
    by_id = {r.id: r for r in _runs(engine)}
    assert by_id[victim.id].status == "failed"
    replays = [r for r in by_id.values() if r.config.get("attempt") == 1]
    assert replays and {r.status for r in replays} == {"finished"}
    victim_done = count_episodes_by_status(engine, victim.id).get("succeeded", 0)
    assert summary[0]["replayed"] == victim.config["episodes"] - victim_done > 0
    episodes = _episodes(engine)
    assert Counter(e.seed for e in episodes if e.status == "succeeded") == Counter(range(seed, seed + n))
    assert {e.run_id for e in episodes if e.status != "succeeded"} <= {victim.id}
    assert len(episodes) == n + summary[0]["failed"]
    engine.dispose()
    _wait_for_cpus(cluster, 2)  # the dead node has left: the next tests see the two nodes they started with


def test_ctrl_c_stops_the_clusters_work_within_seconds(cluster: str, postgres_url: str, tmp_path: Path) -> None:
    engine = open_store(postgres_url)
    process = _sparring(_env(postgres_url, tmp_path), "play", "math-reflection", *SCRIPTED, "-n", "20000",
                        "-c", "4", "--workers", "2", "--ray", cluster)
    workers = [_worker_run(engine, worker=k) for k in (0, 1)]
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    code, summary, stderr = _finish(process)

    assert time.monotonic() - sent < 20  # on 2 busy cores; a quiet machine takes about a second
    assert code == 130 and summary is None and "interrupted" in stderr
    assert not any(process_exists(w.pid) for w in workers)  # no worker plays on
    assert {r.status for r in _runs(engine)} == {"interrupted"}
    statuses = Counter(e.status for e in _episodes(engine))
    assert set(statuses) <= {"succeeded", "failed"} and 0 < statuses["succeeded"] < 20000
    assert {e.error for e in _episodes(engine) if e.status == "failed"} <= {INTERRUPTED}
    engine.dispose()


def test_eval_on_ray_gives_the_figures_of_one_process(cluster: str, postgres_url: str, tmp_path: Path) -> None:
    """The same evaluation on the cluster and in one process (a SQLite store): the same figures;
    asked again, the cluster's run is reused."""
    args = ["eval", "--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-incorrect",
            "--turns", "1", "-n", "12"]
    code, on_ray, stderr = _finish(_sparring(_env(postgres_url, tmp_path), *args, "--ray", cluster))
    assert code == 0, stderr
    local_env = _env(f"sqlite:///{tmp_path / 'local.db'}", tmp_path)
    code, here, stderr = _finish(_sparring(local_env, *args))
    assert code == 0, stderr
    figures = [{k: r[k] for k in ("metric", "family", "value", "n", "set")} for r in on_ray]
    assert figures == [{k: r[k] for k in ("metric", "family", "value", "n", "set")} for r in here]
    assert {(r["set"], r["n"]) for r in on_ray if r["metric"] == "pass@turn-1" and r["family"] is None} == {
        ("unseen", 12), ("heldout", 12)}
    engine = open_store(postgres_url)
    evaluations = [r for r in _runs(engine) if r.parent_id is None]
    assert {r.status for r in evaluations} == {"finished"} and all(
        count_episodes_by_status(engine, r.id) == {"succeeded": 12} for r in evaluations)
    engine.dispose()
    code, again, stderr = _finish(_sparring(_env(postgres_url, tmp_path), *args, "--ray", cluster))
    assert code == 0 and {r["reused"] for r in again} == {True}, stderr


def test_retrain_on_ray_plays_its_episodes_and_evaluations_on_the_cluster(cluster: str, postgres_url: str,
                                                                          tmp_path: Path) -> None:
    """A round of the critic (the tiny random model, trained on its own right verdicts; the actor a
    scripted calculator): its practice and training episodes and every evaluation, a candidate's
    gate included, are played by Ray workers into child runs. (Whether the random critic gives
    rows to train on is chance: the next test trains on the cluster for sure.)"""
    env = _env(postgres_url, tmp_path, SPARRING_MODEL=str(save_tiny_model(tmp_path / "tiny")))
    process = _sparring(env, "retrain", "--roles", "critic", "--seat", "actor=scripted:calculator", "--practice", "4",
                        "--every-episodes", "8", "--eval-tasks", "6", "--min-rows", "1", "--judge-rows", "own",
                        "--max-steps", "2", "--max-new-tokens", "16", "--turns", "1", "-c", "4", "--ray", cluster)
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr
    rounds, figures = (json.loads(line) for line in stdout.strip().splitlines())
    [critic] = rounds
    trained = critic["candidate"] is not None
    assert critic["role"] == "critic" and critic["status"] in (("promoted", "rejected") if trained else ("skipped",))
    training = f"critic's training job runs on the Ray cluster at {cluster} (0.5 CPU(s))"
    assert (training in " ".join(stderr.split())) == trained

    engine = open_store(postgres_url)
    runs = _runs(engine)
    children = Counter(r.parent_id for r in runs if r.parent_id)
    assert all(r.config.get("ray") == cluster for r in runs if r.parent_id)
    by_run = Counter(e.run_id for e in _episodes(engine))
    [round_run] = [r for r in runs if r.config.get("purpose") == "retrain round 1"]
    assert by_run[round_run.id] == 0 and children[round_run.id] >= 2  # practice and play, each on workers
    assert sum(by_run[r.id] for r in runs if r.parent_id == round_run.id) == 4 + 8
    evaluations = [r for r in runs if r.parent_id is None and "eval_key" in r.config]
    gates = [r for r in evaluations if "critic@v1" in r.config["purpose"]]
    assert len(evaluations) == 2 + len(gates) and len(gates) == (2 if trained else 0)  # before: 2 sets
    for run in evaluations:
        assert by_run[run.id] == 0 and children[run.id] >= 1
        assert sum(by_run[r.id] for r in runs if r.parent_id == run.id) == 6
    assert {r["set"] for r in figures} == {"unseen", "heldout"} and all("before" in r for r in figures)
    engine.dispose()


@pytest.mark.parametrize("processes", [1, 2], ids=["one-process", "data-parallel"])
def test_a_training_job_runs_as_a_task_of_the_cluster(cluster: str, postgres_url: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, processes: int) -> None:
    """What `retrain --ray` trains with: the job runs as a Ray task on one node (with two
    data-parallel processes: the CPUs of two workers, gloo between them), records itself in the
    store and publishes its candidate to the registry's folder."""
    from app.ray_rounds import RayRounds
    from app.ray_workers import RaySetupError, connect
    from app.settings import load_settings
    from graphs.policies.base import SamplingParams
    from graphs.registry import get_game
    from training.jobs import list_jobs
    from training.trainers.lora import LoraSettings
    from training.trainers.sft_config import SFTTrainingConfig

    monkeypatch.setenv("SPARRING_DATABASE_URL", postgres_url)
    monkeypatch.setenv("SPARRING_RAY_WORKER_CPUS", "0.5")
    settings = load_settings()
    engine = open_store(postgres_url)
    config = SFTTrainingConfig(model=str(save_tiny_model(tmp_path / "tiny")), device="cpu", lora=LoraSettings(r=4),
                               max_steps=2, per_device_train_batch_size=2, max_length=64)
    rows = [{"messages": [{"role": "user", "content": f"What is {a} + 2?"},
                          {"role": "assistant", "content": str(a + 2)}], "seat": "actor", "reward": 1.0}
            for a in range(4)]
    said: list[str] = []
    with connect(settings, cluster) as joined:
        template = PlayJob(settings, "math-reflection", {}, get_game("math-reflection").make_options(),
                           SamplingParams(), 1, None, {})
        result = RayRounds(joined, engine, template, say=said.append).run_job(
            engine, kind="sft", role="actor", rows=rows, config=config, adapters_root=tmp_path / "adapters",
            cache_dir=tmp_path / "cache", isolated=True, processes=processes)
        with pytest.raises(RaySetupError, match="SPARRING_TRAIN_PROCESSES=64 asks one node of the Ray cluster"):
            joined.training_task(64)
    held = "0.5 CPU(s)" if processes == 1 else "1 CPU(s), 2 data-parallel processes"
    assert said == [f"actor's training job runs on the Ray cluster at {cluster} ({held})"]
    assert result.adapter.name == "actor@v1" and result.metrics["steps"] == 2
    assert result.metrics["processes"] == processes
    assert (Path(result.adapter.path) / "adapter_model.safetensors").is_file()
    [job] = list_jobs(engine)
    assert (job.id, job.status, job.role) == (result.job_id, "succeeded", "actor")
    engine.dispose()


@pytest.mark.parametrize(("args", "message"), [
    ([], "--ray needs a PostgreSQL store"),
    (["--every-minutes", "5"], "--every-minutes bounds a round's play by time on this machine"),
    (["--seat", "critic=pool:critic"], "--seat critic: a pool or schedule seat is drawn on this machine each round"),
], ids=["sqlite", "every-minutes", "pool"])
def test_retrain_on_ray_refuses_what_a_round_there_cannot_do(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                              args: list[str], message: str) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    result = CliRunner().invoke(app, ["retrain", *args, "--ray", "127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    if (tmp_path / "one.db").exists():
        engine = open_store(url)
        assert _runs(engine) == []  # nothing was played
        engine.dispose()


def test_ray_refuses_a_gpu_the_cluster_lacks(cluster: str, postgres_url: str, tmp_path: Path) -> None:
    code, _, stderr = _finish(_sparring(_env(postgres_url, tmp_path, SPARRING_DEVICE="cuda"), "play",
                                        "math-reflection", *SCRIPTED, "-n", "4", "--ray", cluster))
    assert code == 2 and "asks for a GPU, but the Ray cluster" in " ".join(stderr.split())
    engine = open_store(postgres_url)
    assert _runs(engine) == []
    engine.dispose()


NO_SPARRING = """import sys


class NoSparring:  # this node's Python cannot import sparring's packages
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"app", "graphs", "storage", "training", "evaluation"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoSparring())
"""


def test_ray_names_a_node_without_sparring(cluster: str, postgres_url: str, tmp_path: Path) -> None:
    """A third node whose Python cannot import sparring (a ``sitecustomize`` hides it: on one
    machine, Ray would otherwise hand the driver's ``sys.path`` to the node's workers)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_SPARRING)
    node = _add_node(cluster, 3, env={**os.environ, "PYTHONPATH": str(site)})
    try:
        code, _, stderr = _finish(_sparring(_env(postgres_url, tmp_path), "play", "math-reflection", *SCRIPTED,
                                            "-n", "4", "--ray", cluster))
    finally:
        stop_group(node, grace_s=5)  # `ray start --block` and its session
    message = " ".join(stderr.split())
    assert code == 2 and "cannot import sparring: install it on every node" in message, stderr
    engine = open_store(postgres_url)
    assert _runs(engine) == []
    engine.dispose()
