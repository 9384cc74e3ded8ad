"""Held-out evaluation with a memory of what was already measured.

A retrain round evaluates the same policies several times: the report's "before" is the
actor gate's baseline, and once the actor's candidate is promoted, its evaluation is the
critic gate's baseline. On 2 CPU cores one evaluation takes minutes, so the evaluator keeps
each result under the exact policies that produced it (backend, adapter and decoding of
every seat) and plays a configuration only once. The tasks, seeds and game options are fixed
per evaluator, which is what makes the figures comparable across rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Engine

from evaluation.metrics import run_metrics
from graphs.context import GameOptions
from graphs.games import GameSpec
from graphs.policies.policy import Policy
from graphs.runner import play
from graphs.tasks.base import Task
from storage.recorder import Recorder
from storage.records import RunRecord


PhaseProgress = Callable[[str, int, int | None], None]
"""Reports ``(phase, done, total)`` as long work advances; the CLI draws one bar per phase."""


@dataclass
class Evaluator:
    """Plays ``tasks`` greedily with given policies (logged as their own run) and returns the
    run's metrics; the same policies twice cost one evaluation."""

    engine: Engine
    game: GameSpec
    tasks: list[Task]
    seed: int
    options: GameOptions
    concurrency: int = 16
    say: Callable[[str], None] = lambda message: None
    progress: PhaseProgress = lambda phase, done, total: None
    _memory: dict[Hashable, dict[str, Any]] = field(default_factory=dict, repr=False)

    async def __call__(self, policies: Mapping[str, Policy], *, label: str) -> dict[str, Any]:
        greedy = {seat: replace(p, sampling=replace(p.sampling, temperature=0.0)) for seat, p in policies.items()}
        key = _key(greedy)
        if key in self._memory:
            self.say(f"{label}: same policies as {self._memory[key]['label']!r}, reusing its figures")
            return self._memory[key]
        self.say(f"{label}: playing {len(self.tasks)} held-out tasks")
        run, done = RunRecord.new(self.game.name, {"purpose": label}, self.seed), 0
        run_id = run.id

        def advance(_episode: object) -> None:
            nonlocal done
            done += 1
            self.progress(label, done, len(self.tasks))

        self.progress(label, 0, len(self.tasks))
        with Recorder(self.engine) as recorder:
            recorder.start_run(run)
            report = await play(self.game, self.tasks, greedy, recorder, concurrency=self.concurrency, seed=self.seed,
                                options=self.options, run_id=run_id, on_episode=advance)
            recorder.finish_run(run_id, "finished", {"purpose": label})
        metrics = {**run_metrics(self.engine, run_id), "run_id": run_id, "label": label,
                   "episodes": len(report.episodes),
                   "failed": sum(e.status != "succeeded" for e in report.episodes)}
        if not metrics["failed"]:  # a run with failed episodes is not worth reusing
            self._memory[key] = metrics
        return metrics


def _key(policies: Mapping[str, Policy]) -> Hashable:
    return tuple(sorted(
        (seat, id(p.backend), p.adapter, p.sampling.max_new_tokens, p.sampling.top_p, p.sampling.stop)
        for seat, p in policies.items()
    ))
