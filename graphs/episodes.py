"""Play many episodes of a game concurrently and record every one of them.

Concurrency is what feeds the batching backend: C episodes run as asyncio tasks, and their
model calls meet in the backend's queue. Failures are data: an exception in one episode is
recorded on that episode (status, message, where it happened) and the others go on.
"""

from __future__ import annotations

import asyncio
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from graphs.context import EpisodeContext, GameOptions
from graphs.policies.policy import Policy
from graphs.registry import GameSpec
from graphs.seats import RULES
from graphs.tasks.base import Task
from storage.records import EpisodeEnd, EpisodeStart, EpisodeStatus, RecordSink
from storage.redact import redact


@runtime_checkable
class PerEpisode(Protocol):
    """Policies that change from episode to episode (``app.seat_pools.spec.EpisodePolicies``):
    asked with each episode's seed, so its draw does not depend on which episode starts first."""

    def for_episode(self, seed: int) -> Mapping[str, Policy]: ...


@dataclass(frozen=True)
class EpisodeSummary:
    episode_id: str
    task_id: str
    status: EpisodeStatus
    reward: float | None
    num_turns: int
    completion_tokens: int
    outcome: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_stage: str | None = None


@dataclass
class PlayReport:
    game: str
    run_id: str | None
    episodes: list[EpisodeSummary]
    wall_s: float

    def count(self, status: EpisodeStatus) -> int:
        return sum(e.status == status for e in self.episodes)

    @property
    def completion_tokens(self) -> int:
        return sum(e.completion_tokens for e in self.episodes)

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s > 0 else 0.0


def _describe(exc: BaseException) -> str:
    """The episode's error: keys and passwords an upstream echoed are masked (storage.redact)."""
    message = str(exc).strip() or "(no message)"
    return redact(f"{type(exc).__name__}: {message}")


async def play_episode(
    game: GameSpec,
    graph: Any,
    task: Task,
    policies: Mapping[str, Policy],
    sink: RecordSink,
    *,
    seed: int,
    options: GameOptions,
    run_id: str | None = None,
    timeout_s: float | None = None,
) -> EpisodeSummary:
    """Play one episode; never raises for a failure inside the episode (only cancellation)."""
    episode_id = uuid.uuid4().hex
    sink.episode_started(
        EpisodeStart(
            id=episode_id,
            run_id=run_id,
            game=game.name,
            task_id=task.id,
            task_source=task.source,
            split=task.split,
            difficulty=task.difficulty,
            seed=seed,
            seats={s.name: policies[s.name].label if s.name in policies else RULES
                   for s in game.playing_seats(options)},
            task=task.to_dict(),
        )
    )
    ctx = EpisodeContext(
        episode_id=episode_id,
        task=task,
        seats={s.name: s for s in game.seats},
        policies=dict(policies),
        sink=sink,
        seed=seed,
        options=options,
    )
    status, reward, outcome, error = EpisodeStatus.SUCCEEDED, None, {}, None
    try:
        state = await asyncio.wait_for(graph.ainvoke(game.initial_state(task, options), context=ctx), timeout_s)
        result = game.outcome(state)
        reward, outcome = result.reward, result.summary
    except TimeoutError:
        status, error = EpisodeStatus.TIMEOUT, f"episode exceeded its {timeout_s:g} s time limit"
    except Exception as exc:  # one bad episode never stops the batch: record it and go on
        status, error = EpisodeStatus.FAILED, _describe(exc)
        outcome = {"traceback": redact(traceback.format_exc(limit=8))}
    stage = None if status == EpisodeStatus.SUCCEEDED else ctx.stage
    sink.episode_finished(
        EpisodeEnd(episode_id, status, reward, ctx.num_turns, outcome, error=error, error_stage=stage)
    )
    return EpisodeSummary(
        episode_id, task.id, status, reward, ctx.num_turns, ctx.completion_tokens, outcome, error, stage
    )


async def play(
    game: GameSpec,
    tasks: Sequence[Task],
    policies: Mapping[str, Policy] | Callable[[], Mapping[str, Policy]],
    sink: RecordSink,
    *,
    concurrency: int,
    seed: int,
    options: GameOptions | None = None,
    run_id: str | None = None,
    timeout_s: float | None = None,
    on_episode: Callable[[EpisodeSummary], None] | None = None,
    keep_going: Callable[[], bool] | None = None,
) -> PlayReport:
    """Play one episode per task, at most ``concurrency`` at a time.

    ``policies`` may be a function: it is called as each episode starts, so a deploy during
    the run changes the policies of new episodes while running ones keep theirs; one that is
    also ``PerEpisode`` is asked ``for_episode(seed)`` with each episode's seed instead.
    ``keep_going`` is asked as each episode is about to start: once it says False, no more
    start (running ones finish) and the report holds the episodes played. ``options``: the
    game's own options (``game.make_options(...)``), its defaults when None.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    options = game.make_options() if options is None else game.check_options(options)
    current = policies if callable(policies) else lambda: policies
    missing = [s.name for s in game.playing_seats(options) if s.kind != "judge" and s.name not in current()]
    if missing:
        raise ValueError(f"game {game.name!r} needs a policy for seat(s) {', '.join(missing)}")
    choose = policies.for_episode if isinstance(policies, PerEpisode) else lambda _seed: current()
    graph = game.build()
    gate = asyncio.Semaphore(concurrency)
    started = time.perf_counter()

    async def one(i: int, task: Task) -> EpisodeSummary | None:
        async with gate:
            if keep_going is not None and not keep_going():
                return None
            summary = await play_episode(
                game, graph, task, choose(seed + i), sink,
                seed=seed + i, options=options, run_id=run_id, timeout_s=timeout_s,
            )
        if on_episode:
            on_episode(summary)
        return summary

    episodes = await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
    return PlayReport(game.name, run_id, [e for e in episodes if e is not None], time.perf_counter() - started)
