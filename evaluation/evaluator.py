"""Held-out evaluation, remembered in the store so nothing is played twice.

A retrain round evaluates the same policies several times (the report's "before" is the
actor gate's baseline; once the actor's candidate is promoted, its evaluation is the critic
gate's baseline), and ``sparring eval`` may be asked the same question again. On 2 CPU cores
one evaluation takes minutes, so an evaluation is keyed by everything that decides its
outcome: the game (and its ``revision``), each seat's backend, model, adapter and decoding
(always greedy; a scripted bot's source file digest too), a digest of the tasks (ids,
questions and answers), the seed and the game options. Before
playing, the evaluator looks for a finished run of the same key with no failed episode, in
this process's memory and then in the store, and reuses its figures. Within one evaluator, a
greedy request a model seat already answered in an earlier evaluation (the same adapter,
messages and decoding) is answered from memory (``evaluation.replay``).

Each evaluation is a run of its own. Its ``config`` is ``{"purpose": label, "evaluation":
key, "eval_key": digest of key}``; when it finishes, its ``summary`` is exactly::

    {"metrics": {name: Estimate.to_dict()},   # {"value", "n", "low", "high"}
     "policies": {seat: "actor@v1" | "base" | "scripted:calculator" | "openai:MODEL" | "rules"},
     "label": label,                          # what the evaluation was for
     "tasks": n,                              # how many tasks it played
     "set": name,                             # the task set's name (Evaluator.name: a split, a file)
     "families": {name: {family: Estimate.to_dict()}}}  # each metric by task family (evaluation.families),
                                                        # {} when the tasks are of one family

``sparring report`` and the retrain plots read these summaries. Per-task outcomes are not
stored there: they are recomputed from the run's episodes (``evaluation.metrics``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sqlalchemy import Engine

from evaluation.families import by_family
from evaluation.metrics import run_estimates
from evaluation.replay import GreedyReplay
from graphs.context import GameOptions
from graphs.episodes import play
from graphs.metrics.stats import Estimate
from graphs.policies.policy import Policy
from graphs.registry import GameSpec
from graphs.seats import RULES
from graphs.tasks.base import Task
from storage.evaluation_rows import finished_runs
from storage.queries import count_episodes_by_status
from storage.recorder import Recorder
from storage.records import RunRecord

Deciding = Callable[[Mapping[str, Policy]], Awaitable[dict[str, Policy]]]
Player = Callable[[Mapping[str, str], list[Task], str, Callable[[int], None]], Awaitable[dict[int, str]]]
"""Plays tasks elsewhere (``sparring eval --ray``) given the seats' specs, the tasks, the evaluation's
run id (its workers' runs are children of it) and a callback of the episodes done; returns the
played episodes' statuses by seed (``storage.queries.played_seeds``)."""
PlayerSpecs = Callable[[Mapping[str, Policy]], dict[str, str]]
"""The seats' specs of policies a player plays, for a call that names none (a retrain's gates)."""
PhaseProgress = Callable[[str, int, int | None], None]
"""Reports ``(phase, done, total)`` as long work advances; the CLI draws one bar per phase."""


@dataclass(frozen=True)
class EvaluationResult:
    metrics: dict[str, Estimate]
    per_task: dict[str, dict[str, float]]
    """metric name -> task id -> the task's outcome, for paired comparisons"""
    run_id: str
    label: str
    """the label of the run that played it (an earlier one's when reused)"""
    episodes: int
    failed: int
    reused: bool = False


def policy_label(policy: Policy | None) -> str:
    """How a seat's policy is named in an evaluation summary."""
    if policy is None:
        return RULES
    if policy.adapter:
        return policy.adapter
    backend = policy.backend
    if backend.name == "scripted":
        return backend.model_name
    if backend.name == "openai" and not getattr(backend, "vllm", False):
        return f"openai:{backend.model_name}"
    return "base"


def tasks_digest(tasks: list[Task]) -> str:
    """A digest of the tasks' ids, questions and answers, in order."""
    text = json.dumps([[t.id, t.question, t.answer] for t in tasks], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def evaluation_key(game: GameSpec, policies: Mapping[str, Policy], tasks: list[Task], seed: int,
                   options: GameOptions) -> dict[str, Any]:
    seats = {
        seat: {"backend": p.backend.name, "model": p.backend.model_name, "adapter": p.adapter,
               **({"precision": precision} if (precision := getattr(p.backend, "precision", None)) else {}),
               **({"kernels": kernels} if (kernels := getattr(p.backend, "kernels", None)) else {}),
               **({"code": code} if (code := getattr(p.backend, "code", None)) else {}),
               "decoding": {"temperature": p.sampling.temperature, "top_p": p.sampling.top_p,
                            "max_new_tokens": p.sampling.max_new_tokens, "stop": list(p.sampling.stop)}}
        for seat, p in sorted(policies.items())
    }
    return {"game": game.name, **({"revision": game.revision} if game.revision > 1 else {}), "seats": seats,
            "tasks": tasks_digest(tasks), "n_tasks": len(tasks), "seed": seed, "options": asdict(options)}


def digest(key: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def greedy(policies: Mapping[str, Policy]) -> dict[str, Policy]:
    return {seat: replace(p, sampling=replace(p.sampling, temperature=0.0)) for seat, p in policies.items()}


@dataclass
class Evaluator:
    """Plays ``tasks`` greedily with given policies (logged as their own run) and returns the
    run's metrics; the same policies twice cost one evaluation, across processes too."""

    engine: Engine
    game: GameSpec
    tasks: list[Task]
    seed: int
    options: GameOptions
    concurrency: int = 16
    say: Callable[[str], None] = lambda message: None
    progress: PhaseProgress = lambda phase, done, total: None
    replay: GreedyReplay = field(default_factory=GreedyReplay, repr=False)
    """Greedy answers of earlier evaluations, replayed (shared by the evaluators of one command)."""
    name: str = "heldout"
    """What the task set is called in tables and gate reasons (e.g. its split); not in the key."""
    deciding: Deciding | None = field(default=None, repr=False)
    """Maps the policies onto those an evaluation that decides plays (``graphs.policies.deciding``:
    float32 twins of in-process backends that are not batch-invariant); None: as given."""
    player: Player | None = field(default=None, repr=False)
    """Plays the episodes instead of this process (then ``__call__`` needs the seats' specs, or
    ``player_specs`` to name them)."""
    player_specs: PlayerSpecs | None = field(default=None, repr=False)
    _memory: dict[str, EvaluationResult] = field(default_factory=dict, repr=False)

    def key(self, policies: Mapping[str, Policy]) -> dict[str, Any]:
        return evaluation_key(self.game, greedy(policies), self.tasks, self.seed, self.options)

    def remembered(self, policies: Mapping[str, Policy]) -> EvaluationResult | None:
        """An earlier evaluation of the same key with no failed episode, if there is one."""
        key_digest = digest(self.key(policies))
        if key_digest in self._memory:
            return self._memory[key_digest]
        found = _stored_run(self.engine, key_digest)
        if found is not None:
            self._memory[key_digest] = found
        return found

    async def __call__(self, policies: Mapping[str, Policy], *, label: str,
                       seats: Mapping[str, str] | None = None) -> EvaluationResult:
        """Evaluate ``policies`` (built from the specs ``seats``, which a ``player`` needs)."""
        played = greedy(policies)
        if self.deciding is not None:
            played = await self.deciding(played)
        earlier = self.remembered(played)
        if earlier is not None:
            self.say(f"{label}: reusing run {earlier.run_id[:12]} (same policies, tasks and settings)")
            return replace(earlier, reused=True)
        key = self.key(played)
        self.say(f"{label}: playing {len(self.tasks)} tasks")
        run = RunRecord.new(self.game.name, {"purpose": label, "evaluation": key, "eval_key": digest(key)}, self.seed)
        done = 0

        def advance(_episode: object) -> None:
            nonlocal done
            done += 1
            self.progress(label, done, len(self.tasks))

        self.progress(label, 0, len(self.tasks))
        with Recorder(self.engine) as recorder:
            recorder.start_run(run)
            try:
                if self.player is None:
                    replaying = {seat: replace(p, backend=self.replay.wrap(p.backend)) for seat, p in played.items()}
                    report = await play(self.game, self.tasks, replaying, recorder, concurrency=self.concurrency,
                                        seed=self.seed, options=self.options, run_id=run.id, on_episode=advance)
                    statuses = [e.status for e in report.episodes]
                else:
                    if seats is None and self.player_specs is not None:
                        seats = self.player_specs(played)
                    if seats is None:
                        raise ValueError("an evaluator with a player needs the seats' specs")
                    found = await self.player(seats, self.tasks, run.id,
                                              lambda done_now: self.progress(label, done_now, len(self.tasks)))
                    statuses = [*found.values(), *["unplayed"] * (len(self.tasks) - len(found))]
            except BaseException as exc:  # the run is never reused: only finished runs are
                status = "failed" if isinstance(exc, Exception) else "interrupted"
                recorder.abort_running(run.id, f"evaluation {label!r} stopped: {status}")
                recorder.finish_run(run.id, status, {"label": label})
                raise
            recorder.flush()
            measured = run_estimates(self.engine, run.id)
            labels = {s.name: policy_label(played.get(s.name)) for s in self.game.seats}
            recorder.finish_run(run.id, "finished", summary(measured.metrics, labels, label, len(self.tasks),
                                                            _families(measured.per_task, self.tasks), self.name))
        result = EvaluationResult(measured.metrics, measured.per_task, run.id, label, len(statuses),
                                  sum(status != "succeeded" for status in statuses))
        if not result.failed:  # a run with failed episodes is not worth reusing
            self._memory[digest(key)] = result
        return result


def summary(metrics: Mapping[str, Estimate], policies: Mapping[str, str], label: str, tasks: int,
            families: Mapping[str, Mapping[str, Estimate]] | None = None, set_name: str = "") -> dict[str, Any]:
    """An evaluation run's summary, in the shape the module docstring documents."""
    return {"metrics": {name: e.to_dict() for name, e in metrics.items()}, "policies": dict(policies),
            "label": label, "tasks": tasks, "set": set_name,
            "families": {name: {f: e.to_dict() for f, e in found.items()} for name, found in (families or {}).items()}}


def _families(per_task: Mapping[str, Mapping[str, float]], tasks: list[Task]) -> dict[str, dict[str, Estimate]]:
    """Each metric by task family, or nothing when the tasks are of one family."""
    found = {name: by_family(outcomes, tasks) for name, outcomes in per_task.items()}
    return found if any(len(f) > 1 for f in found.values()) else {}


def _stored_run(engine: Engine, key_digest: str) -> EvaluationResult | None:
    """The newest finished evaluation run of this key whose episodes all succeeded."""
    for run in reversed(finished_runs(engine, config={"eval_key": key_digest})):
        counts = count_episodes_by_status(engine, run.id)
        if set(counts) == {"succeeded"} and counts["succeeded"] == run.summary.get("tasks"):
            measured = run_estimates(engine, run.id)
            return EvaluationResult(measured.metrics, measured.per_task, run.id, run.summary.get("label", ""),
                                    counts["succeeded"], 0)
    return None
