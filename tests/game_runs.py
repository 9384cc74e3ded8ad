"""Play a game's episodes into a store as one finished run (the tests of one game each)."""

from __future__ import annotations

import asyncio

from graphs.contract import GameSpec
from graphs.episodes import PlayReport, play
from storage.recorder import Recorder
from storage.records import RunRecord


def play_one_run(engine, game: GameSpec, tasks, policies, *, concurrency: int = 4, **options) -> tuple[PlayReport, str]:
    """Play ``tasks`` (seed 0, the game's options overridden by ``options``); the report and the run id."""
    run = RunRecord.new(game.name, {}, 0)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        report = asyncio.run(play(game, tasks, policies, recorder, concurrency=concurrency, seed=0, run_id=run.id,
                                  options=game.make_options(options)))
        recorder.finish_run(run.id, "finished", {})
    return report, run.id
