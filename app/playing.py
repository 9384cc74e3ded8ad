"""Playing episodes of a `sparring play` command in this process, into a run of its own.

The same code plays all of a command's episodes (``--workers 1``) or one worker's share of
them (``--workers N``). Episode ``i`` of the command always gets the command's task ``i``
and the seed ``seed + i``, whichever process plays it, so a share plays exactly what one
process would have played there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from app.interrupts import run_interruptible
from app.settings import Settings
from graphs.context import GameOptions
from graphs.episodes import EpisodeSummary, PlayReport
from graphs.policies.base import SamplingParams
from graphs.tasks.base import Task
from storage.recorder import Recorder
from storage.records import EpisodeStatus, RunRecord

INTERRUPTED = "interrupted by the user (Ctrl-C or SIGTERM)"


@dataclass(frozen=True)
class PlayJob:
    """What every process of one `sparring play` command plays with (picklable, for workers)."""

    settings: Settings
    game: str
    seats: dict[str, str]
    """seat name -> policy spec, as `--seat` gives them"""
    options: GameOptions
    sampling: SamplingParams
    concurrency: int
    """episodes played at once by each process"""
    timeout_s: float | None
    config: dict[str, Any]
    """what the command's run records as its config"""
    deciding: bool = False
    """the policies evaluate (``PolicyFactory.deciding``): `sparring eval --ray`'s workers"""

    def run_record(self, *, parent_id: str | None = None, **config: Any) -> RunRecord:
        """A new run of this process, with ``config`` added to the command's."""
        return RunRecord.new(self.game, {**self.config, **config}, self.settings.seed, parent_id=parent_id)


def play_share(
    job: PlayJob,
    tasks: Sequence[Task],
    *,
    first_index: int,
    engine: Engine,
    recorder: Recorder,
    run: RunRecord,
    on_loaded: Callable[[], None],
    on_episode: Callable[[EpisodeSummary], None],
) -> PlayReport:
    """Record ``run``, load the seats' policies, then play ``tasks``, which are the command's
    episodes ``first_index`` onwards. The run is left ``running`` for the caller to finish
    with its summary.

    On Ctrl-C or SIGTERM (raised as KeyboardInterrupt) the running episodes are marked
    failed, the run ends ``interrupted`` and KeyboardInterrupt is raised again; on an error,
    the same with ``failed``, and the error is raised again.
    """
    from app.seat_pools.resolve import episode_policies
    from app.wiring import PolicyFactory
    from graphs.episodes import play
    from graphs.registry import get_game

    spec = get_game(job.game)
    factory = PolicyFactory(job.settings, job.sampling, engine, deciding=job.deciding)
    recorder.start_run(run)

    async def main() -> PlayReport:
        try:
            policies = await episode_policies(factory, engine, spec, job.seats, first_seed=job.settings.seed)
            on_loaded()
            return await play(
                spec,
                tasks,
                policies,
                recorder,
                concurrency=job.concurrency,
                seed=job.settings.seed + first_index,
                options=job.options,
                run_id=run.id,
                timeout_s=job.timeout_s,
                on_episode=on_episode,
            )
        finally:
            await factory.aclose()

    try:
        return run_interruptible(main())
    except KeyboardInterrupt:
        recorder.abort_running(run.id, INTERRUPTED)
        recorder.finish_run(run.id, "interrupted", {})
        raise
    except Exception as exc:
        recorder.abort_running(run.id, f"the run stopped: {exc}")
        recorder.finish_run(run.id, "failed", {"error": str(exc)})
        raise


def summarize(engine: Engine, run_id: str, game: str, *, completion_tokens: int, wall_s: float) -> dict[str, Any]:
    """The summary of a run from the store (a command's run covers its workers' runs)."""
    from evaluation.metrics import run_metrics
    from storage.queries import count_episodes_by_status

    counts = count_episodes_by_status(engine, run_id)
    return {
        "run_id": run_id,
        "game": game,
        "episodes": sum(counts.values()),
        **{status.value: counts.get(status.value, 0) for status in EpisodeStatus if status != EpisodeStatus.RUNNING},
        **run_metrics(engine, run_id),
        "generated_tokens": completion_tokens,
        "tokens_per_s": round(completion_tokens / wall_s, 1) if wall_s > 0 else 0.0,
        "wall_s": round(wall_s, 1),
    }

