"""`sparring retrain --ray`: the episodes of each round, every evaluation of its gates and
report, and each role's training, run by a Ray cluster; the loop and its decisions stay here.

A round's practice and training episodes are shares of Ray workers (``app.ray_workers``), each
into a child run of the round's run, in the one PostgreSQL store the dataset builds then read
(by commit number, so none is missed). An evaluation's episodes are children of its run, as
`sparring eval --ray` plays them. A worker loads the policies its share names when it starts,
by spec: a gate's candidate as ``model:ROLE@vN``, a live version likewise, a stand-in as its
scripted bot. No worker outlives its share, so a promoted version is deployed to the cluster
by being named: the next share loads it. A role's training job is a Ray task on a node with a
GPU when the settings ask for CUDA (else with a worker's CPUs), or with one for each of its
``SPARRING_TRAIN_PROCESSES`` data-parallel processes, on one node: it records itself in the
store and publishes its candidate to the registry's folder, which every node mounts at the same path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.playing import PlayJob
from app.ray_workers import Cluster, evaluation_player, on_ray_gpu, play_on_ray
from graphs.context import GameOptions
from graphs.policies.policy import Policy
from graphs.tasks.base import Task

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from evaluation.evaluator import Player
    from training.jobs import JobResult


MODEL_BACKENDS = ("inprocess", "openai")
"""backends a ``model`` spec makes (in-process, or a vLLM server): their seats are named by adapter"""


def seat_specs(policies: Mapping[str, Policy], named: Mapping[str, str]) -> dict[str, str]:
    """The specs a worker loads ``policies`` from: a model's seat as its adapter version (or the
    base model), a scripted seat as its bot; a seat without a policy (a rule-checking judge) as
    ``named`` gives it."""
    specs = dict(named)
    for seat, policy in policies.items():
        backend = policy.backend
        if backend.name == "scripted":
            specs[seat] = backend.model_name  # "scripted:NAME"
        elif backend.name in MODEL_BACKENDS and named.get(seat, "model").startswith("model"):
            specs[seat] = f"model:{policy.adapter or 'base'}"
    return specs


@dataclass
class RayRounds:
    """What `retrain --ray` hands the rounds: a player for its evaluators and one for its episodes."""

    cluster: Cluster
    engine: Engine
    template: PlayJob
    """the command's settings, game, sampling and concurrency; its seats are the command's specs"""
    say: Callable[[str], None] = lambda message: None

    def evaluations(self) -> tuple[Player, Callable[[Mapping[str, Policy]], dict[str, str]]]:
        """The evaluators' player (greedy, in the deciding precision, as every deciding evaluation) and how it names
        the seats of the policies a gate hands it."""
        deciding = replace(self.template, sampling=replace(self.template.sampling, temperature=0.0), deciding=True)
        return evaluation_player(self.cluster, self.engine, deciding), self.specs

    def specs(self, policies: Mapping[str, Policy]) -> dict[str, str]:
        return seat_specs(policies, self.template.seats)

    def run_job(self, engine: Engine, *, progress: Callable[[int, int], None] | None = None,
                **job: Any) -> JobResult:
        """``training.jobs.run_training_job`` as a Ray task on one node, with a GPU (or a worker's
        CPUs) for each of its ``processes`` (``progress`` is not reported from it); Ctrl-C cancels
        the task."""
        import ray

        processes = job.get("processes", 1)
        resources = self.cluster.training_task(processes)
        ref = ray.remote(_train).options(**resources, max_retries=0).remote(self.template.settings.database_url, job)
        held = f"{resources['num_gpus']:g} GPU(s)" if resources["num_gpus"] else f"{resources['num_cpus']:g} CPU(s)"
        shared = f", {processes} data-parallel processes" if processes > 1 else ""
        self.say(f"{job['role']}'s training job runs on the Ray cluster at {self.cluster.address} ({held}{shared})")
        try:
            return ray.get(ref)
        except BaseException:
            ray.cancel(ref, force=True)
            raise

    async def play(self, policies: Mapping[str, Policy], tasks: list[Task], *, seed: int, options: GameOptions,
                   run_id: str, advance: Callable[[int], None]) -> int:
        """Play ``tasks`` (episode i: task i, seed ``seed`` + i) with ``policies`` on the cluster,
        as children of run ``run_id``; returns the episodes played to their end. RuntimeError
        when a worker's share failed, or episodes stayed unplayed after the replays."""
        job = replace(self.template, settings=self.template.settings.model_copy(update={"seed": seed}),
                      seats=self.specs(policies), options=options)
        outcome = await play_on_ray(job, tasks, cluster=self.cluster, workers=self.cluster.capacity,
                                    engine=self.engine, parent_run_id=run_id,
                                    on_progress=lambda played: advance(len(played)))
        if outcome.errors or outcome.unplayed:
            problems = [*outcome.errors, *([f"{outcome.unplayed} episodes unplayed"] if outcome.unplayed else [])]
            raise RuntimeError("the cluster could not play the round's episodes: " + "; ".join(problems))
        return len(tasks)


def _train(database_url: str, job: dict[str, Any]) -> JobResult:
    """On a node: the training job, through a store connection of its own."""
    from storage.engine import open_store
    from training.jobs import run_training_job

    job = {**job, "config": replace(job["config"], device=on_ray_gpu(job["config"].device))}
    engine = open_store(database_url, migrate=False)
    try:
        return run_training_job(engine, **job)
    finally:
        engine.dispose()
