"""`--ray ADDRESS`: the episodes of one `sparring play` or `sparring eval` command played by
workers on a Ray cluster, all writing to one PostgreSQL store.

The command's episodes are cut into shares as `--workers N` cuts them (``app.workers.shares``),
one per worker: a Ray actor that loads its own policies (one model backend per worker) and
plays its share into a run of its own whose ``parent_id`` is the command's run
(``app.workers.play_one_share``). Episode i keeps task i and seed SEED+i whatever the size of
the cluster. This process follows the work through the actors' results and through the store:
what is committed there is what counts.

A worker that dies (its process killed, its node gone) ends its run ``failed`` with the reason
and its running episodes failed ("interrupted: ray worker K ... died"). The episodes of its
share that the store does not hold as played to their end (``storage.queries.played_seeds``)
are played again by a new worker, at most ``SPARRING_RAY_REPLAYS`` times; a committed episode
is never played again. What is left after that is reported as not played. A worker whose share
raised an error (a model that does not load) is not replayed: the error would repeat.

Ctrl-C or SIGTERM (a cancellation of ``play_on_ray``, see ``app.interrupts``) kills every worker
of the command at once (``ray.kill``), waits until they are gone, then ends their runs
``interrupted`` and fails their running episodes.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sqlalchemy import Engine

from app.playing import INTERRUPTED, PlayJob
from app.settings import Settings
from app.workers import Share, play_one_share, shares
from graphs.tasks.base import Task
from storage.models import RunStatus
from storage.orphans import end_runs, wait_for_local_processes
from storage.queries import played_seeds
from storage.redact import redact

if TYPE_CHECKING:
    from evaluation.evaluator import Player

INSTALL = "pip install 'sparring[ray]' (in a checkout: .venv/bin/pip install ray==2.60.0)"
POLL_S = 0.5
"""How often the store and the workers are looked at."""
PROBE_TIMEOUT_S = 120.0
"""How long each node may take to start a process that imports sparring and reaches the store."""
KILL_WAIT_S = 10.0
"""How long to wait for killed workers to be gone before their runs are ended."""
CONNECT_TIMEOUT_S = 5.0


class RaySetupError(ValueError):
    """Ray cannot play this command's episodes; the message says how to fix it."""


@dataclass
class RayOutcome:
    completion_tokens: int = 0
    lost: list[str] = field(default_factory=list)
    """why each worker that died is gone (its unfinished episodes were played again)"""
    errors: list[str] = field(default_factory=list)
    """the error of each worker whose share raised one (not replayed)"""
    replayed: int = 0
    """episodes handed out again because their worker died"""
    unplayed: int = 0
    """episodes never played to their end: their workers died more than SPARRING_RAY_REPLAYS times"""


@dataclass
class Cluster:
    """A connected Ray cluster and how a worker is placed on it (``connect`` makes one)."""

    address: str
    worker_cpus: float
    worker_gpus: int
    capacity: int
    """workers the cluster holds at once (its CPUs, or GPUs, over what one worker asks for)"""
    node: dict[str, float] = field(default_factory=dict)
    """the most CPUs and GPUs one node has ({"CPU": .., "GPU": ..}): where a training task must fit"""

    def training_task(self, processes: int) -> dict[str, float]:
        """The resources of a training task of ``processes`` data-parallel processes (Ray's
        ``num_cpus`` and ``num_gpus``): one GPU each when the workers take GPUs, else a worker's
        CPUs each; all on one node. RaySetupError when no node has them."""
        gpus = self.worker_gpus * processes
        cpus = self.worker_cpus * (1 if gpus else processes)
        if gpus > self.node.get("GPU", 0) or cpus > self.node.get("CPU", 0):
            asked = f"{gpus} GPUs" if gpus else f"{cpus:g} CPUs"
            raise RaySetupError(
                f"SPARRING_TRAIN_PROCESSES={processes} asks one node of the Ray cluster at {self.address} for "
                f"{asked}, but its largest has {self.node.get('GPU', 0):g} GPU(s) and {self.node.get('CPU', 0):g} "
                "CPU(s): lower it, or add a node that has them"
            )
        return {"num_cpus": cpus, "num_gpus": gpus}

    def close(self) -> None:
        import ray

        ray.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(settings: Settings, address: str) -> Cluster:
    """Join the Ray cluster at ``address`` and check, before anything is played, that it can play:
    the store is PostgreSQL, the cluster has the GPU the settings ask for, and every node can
    import sparring and reach the store. Raises RaySetupError saying what to fix."""
    if not settings.database_url.startswith("postgresql"):
        raise RaySetupError(
            "--ray needs a PostgreSQL store that every node of the cluster reaches (a SQLite file lives on this "
            "machine only): set SPARRING_DATABASE_URL=postgresql+psycopg://USER@HOST:5432/DB or pass --db"
        )
    try:
        import ray
    except ImportError:
        raise RaySetupError(f"--ray needs Ray, which is not installed here: {INSTALL}") from None
    _check_reachable(address)
    try:
        ray.init(address=address, namespace="sparring", logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RaySetupError(f"could not join the Ray cluster at {address!r}: {exc}. Start one with `ray start "
                            "--head` (docs/scaling.md) or pass its address, e.g. --ray 10.0.0.5:6379") from None
    try:
        cluster = _placement(settings, address, ray.cluster_resources())
        _probe_nodes(settings.database_url)
    except BaseException:
        ray.shutdown()
        raise
    return cluster


def _check_reachable(address: str) -> None:
    """A TCP connection to ``address`` (ray.init would wait minutes for one that is not there)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RaySetupError(f"--ray {address!r} is not a Ray address; use HOST:PORT (the head's GCS port, 6379 by "
                            "default), ray://HOST:10001 (Ray Client) or auto")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RaySetupError(f"no Ray cluster answers at {address} ({exc.strerror or exc}); start its head with "
                            f"`ray start --head --port {port}` or check the address (`ray status` on the head "
                            "prints it)") from None


def _placement(settings: Settings, address: str, resources: dict[str, float]) -> Cluster:
    gpus = 1 if settings.device.startswith("cuda") else 0
    if gpus and resources.get("GPU", 0) < 1:
        raise RaySetupError(f"SPARRING_DEVICE={settings.device} asks for a GPU, but the Ray cluster at {address} "
                            "has none (`ray status` lists its resources): start its nodes on GPU machines (`ray "
                            "start --num-gpus N`) or set SPARRING_DEVICE=cpu")
    cpus = resources.get("CPU", 0)
    if cpus < settings.ray_worker_cpus:
        raise RaySetupError(f"the Ray cluster at {address} has {cpus:g} CPU(s), fewer than one worker asks for "
                            f"(SPARRING_RAY_WORKER_CPUS={settings.ray_worker_cpus:g}): lower it or add nodes")
    capacity = int(resources["GPU"]) if gpus else int(cpus // settings.ray_worker_cpus)
    return Cluster(address, settings.ray_worker_cpus, gpus, max(1, capacity), _largest_node())


def _largest_node() -> dict[str, float]:
    """The most CPUs and the most GPUs one live node of the joined cluster has."""
    import ray

    alive = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    return {kind: max((float(r.get(kind, 0)) for r in alive), default=0.0) for kind in ("CPU", "GPU")}


def _probe_nodes(database_url: str) -> None:
    """Run ``_probe`` on every live node: a node that cannot import sparring or reach the store
    is named, with the fix, before any episode is played."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(_probe)
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    refs = {
        probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
        .remote(database_url): node
        for node in nodes
    }
    for ref, node in refs.items():
        where = f"node {node.get('NodeManagerAddress')} ({node.get('NodeManagerHostname')})"
        try:
            ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise RaySetupError(f"{where} started no worker in {PROBE_TIMEOUT_S:g} s: see `ray status`") from None
        except ray.exceptions.RayError as exc:
            text = str(exc)
            if "No module named" in text or "ModuleNotFound" in text:
                raise RaySetupError(
                    f"{where} cannot import sparring: install it on every node, in the Python environment that runs "
                    "`ray start` there (`pip install 'sparring[ray,postgres]'`, or `scripts/setup` in a checkout of "
                    "the same version), then restart the node"
                ) from None
            raise RaySetupError(f"{where} cannot play: {redact(_last_line(text))}") from None


def _probe(database_url: str) -> str:
    """On a node: sparring imports (this function's module is loaded by reference) and the store
    answers. Returns the host's name."""
    from storage.engine import driver_message, open_store

    try:
        open_store(database_url, migrate=False).dispose()
    except Exception as exc:
        reason = driver_message(exc.__cause__ or exc)  # the driver's own words, without open_store's advice
        raise RuntimeError(f"it cannot reach the store at {urlsplit(database_url).hostname}: {reason} "
                           "(every node needs the store's host and port; 127.0.0.1 is each node itself)") from None
    return socket.gethostname()


def on_ray_gpu(device: str) -> str:
    """The device a Ray worker or task uses for ``device``: Ray makes the GPU it gave it cuda:0."""
    return "cuda" if device.startswith("cuda:") else device


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else text


class Worker:
    """A Ray actor: one process of the cluster, with its own policies, that plays one share."""

    def where(self) -> str:
        return f"{socket.gethostname()}, pid {os.getpid()}"

    def play(self, job: PlayJob, share: Share) -> int:
        """Play ``share``; returns the tokens the models generated."""
        job = replace(job, settings=job.settings.model_copy(update={"device": on_ray_gpu(job.settings.device)}))
        summary = play_one_share(job, share, on_loaded=lambda: None, on_episode=lambda _episode: None)
        return int(summary["generated_tokens"])


@dataclass
class _Running:
    actor: Any
    share: Share
    where: Any
    """the ObjectRef of ``Worker.where``: its host and pid once it started"""


async def play_on_ray(
    job: PlayJob,
    tasks: Sequence[Task],
    *,
    cluster: Cluster,
    workers: int,
    engine: Engine,
    parent_run_id: str,
    on_progress: Callable[[dict[int, str]], None],
) -> RayOutcome:
    """Play ``tasks`` (the command's episodes 0..n-1) on ``workers`` Ray workers at once, each
    share into a child run of ``parent_run_id``; ``on_progress`` gets the episodes played so far
    (seed -> status) as the store shows them. Cancelled (Ctrl-C): see the module docstring."""
    import ray

    actor_class = ray.remote(Worker).options(num_cpus=cluster.worker_cpus, num_gpus=cluster.worker_gpus,
                                             max_restarts=0, max_concurrency=1)
    parts = shares(len(tasks), min(workers, len(tasks)))
    pending = deque(Share(k, len(parts), part.start, list(tasks[part.start : part.stop]), parent_run_id)
                    for k, part in enumerate(parts))
    running: dict[Any, _Running] = {}
    outcome = RayOutcome()
    started = len(parts)
    try:
        while pending or running:
            while pending and len(running) < workers:
                share = pending.popleft()
                actor = actor_class.remote()
                running[actor.play.remote(job, share)] = _Running(actor, share, actor.where.remote())
            done, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
            for ref in done:
                worker = running.pop(ref)
                for share in _settle(ref, worker, job, tasks, engine, outcome):
                    pending.append(replace(share, worker=started))
                    started += 1
                ray.kill(worker.actor, no_restart=True)
            on_progress(played_seeds(engine, parent_run_id))
            if running:
                await asyncio.sleep(POLL_S)
    except BaseException:
        _stop(running, engine)
        raise
    return outcome


def _settle(ref: Any, worker: _Running, job: PlayJob, tasks: Sequence[Task], engine: Engine,
            outcome: RayOutcome) -> list[Share]:
    """Take a finished worker's result; returns the shares to play again when it died."""
    import ray

    share = worker.share
    try:
        outcome.completion_tokens += ray.get(ref)
        return []
    except ray.exceptions.RayActorError as exc:
        reason = f"ray worker {share.worker} ({_where(worker)}) died: {_last_line(str(exc))}"
        end_runs(engine, {share.run_id: reason})
        outcome.lost.append(reason)
        replay = share.attempt < job.settings.ray_replays
    except ray.exceptions.RayTaskError as exc:  # play_share ended its run failed
        outcome.errors.append(f"ray worker {share.worker}: {_last_line(str(exc.cause or exc))}")
        replay = False
    played = played_seeds(engine, share.parent_run_id)
    seed = job.settings.seed
    left = [i for i in range(share.first_index, share.first_index + len(share.tasks)) if seed + i not in played]
    if not replay:
        outcome.unplayed += len(left)
        return []
    outcome.replayed += len(left)
    return [replace(share, first_index=piece.start, tasks=list(tasks[piece.start : piece.stop]),
                    run_id=uuid.uuid4().hex, attempt=share.attempt + 1) for piece in _pieces(left)]


def _where(worker: _Running) -> str:
    import ray

    try:
        return str(ray.get(worker.where, timeout=0))
    except ray.exceptions.RayError:
        return "before it started"


def _pieces(indices: Sequence[int]) -> list[range]:
    """Sorted ``indices`` as contiguous ranges: a share plays consecutive episodes."""
    pieces: list[range] = []
    for i in indices:
        if pieces and pieces[-1].stop == i:
            pieces[-1] = range(pieces[-1].start, i + 1)
        else:
            pieces.append(range(i, i + 1))
    return pieces


def _stop(running: dict[Any, _Running], engine: Engine) -> None:
    """Kill the command's workers, wait until they are gone (those of this host by their pids;
    at most KILL_WAIT_S), then end their runs interrupted."""
    import ray

    if not running:
        return
    killed = time.monotonic()
    for worker in running.values():
        ray.kill(worker.actor, no_restart=True)
    ray.wait(list(running), num_returns=len(running), timeout=KILL_WAIT_S)
    runs = {worker.share.run_id: INTERRUPTED for worker in running.values()}
    # a killed actor's calls can fail before its process is gone: wait for those of this host
    wait_for_local_processes(engine, runs, timeout_s=max(0.0, KILL_WAIT_S - (time.monotonic() - killed)))
    end_runs(engine, runs, status=RunStatus.INTERRUPTED, error=INTERRUPTED)


def evaluation_player(cluster: Cluster, engine: Engine, template: PlayJob) -> Player:
    """What `sparring eval --ray` gives its evaluators: each evaluation's episodes played on the
    cluster by as many workers as it holds, with ``template``'s settings, game, options and
    decoding and the evaluated seats; a worker's error fails the evaluation."""

    async def play(seats: Mapping[str, str], tasks: list[Task], run_id: str,
                   advance: Callable[[int], None]) -> dict[int, str]:
        job = replace(template, seats=dict(seats))
        outcome = await play_on_ray(job, tasks, cluster=cluster, workers=cluster.capacity, engine=engine,
                                    parent_run_id=run_id, on_progress=lambda played: advance(len(played)))
        if outcome.errors:
            raise RuntimeError("; ".join(outcome.errors))
        return played_seeds(engine, run_id)

    return play
