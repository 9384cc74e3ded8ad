"""The runner on a real store: failures are data, interruptions never look like success."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import uuid

import pytest

from evaluation.metrics import run_metrics
from graphs.episodes import play
from graphs.math_reflection.options import ReflectionOptions
from graphs.policies.base import BackendError
from graphs.policies.policy import Policy
from graphs.policies.scripted import BOTS, ScriptedBackend
from graphs.registry import get_game, scripted_bot
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.queries import EpisodeFilter, get_episode, list_episodes
from storage.recorder import Recorder
from storage.records import EpisodeStatus, RunRecord

GAME = get_game("math-reflection")


def _run(recorder: Recorder) -> str:
    run_id = uuid.uuid4().hex
    recorder.start_run(RunRecord(run_id, GAME.name, {}, 0, socket.gethostname(), os.getpid()))
    return run_id


class Calculator(ScriptedBackend):
    """The calculator bot with a hook run before each answer (to fail, stall or hang)."""

    def __init__(self, before) -> None:
        super().__init__(BOTS["calculator"], bot_name="calculator")
        self.before = before

    async def generate(self, request):
        await self.before(request.messages[-1]["content"])
        return await super().generate(request)


def _stalling_on(task, *, seconds: float) -> dict[str, Policy]:
    """A calculator actor that waits ``seconds`` before answering ``task``, and a critic."""
    async def stall(question: str) -> None:
        if task.question in question:
            await asyncio.sleep(seconds)

    return {"actor": Policy(Calculator(stall)), "critic": Policy(scripted_bot("always-correct"))}


def test_one_bad_episode_never_stops_the_batch(store_url):
    engine = open_store(store_url)
    tasks = load_tasks("arithmetic:1", n=8, seed=0, split="train")
    async def fail_on_fourth(question: str) -> None:
        if tasks[3].question in question:
            raise BackendError("model server answered 500")

    policies = {
        "actor": Policy(Calculator(fail_on_fourth)),
        "critic": Policy(scripted_bot("always-correct")),
    }
    with Recorder(engine) as recorder:
        run_id = _run(recorder)
        report = asyncio.run(play(GAME, tasks, policies, recorder, concurrency=4, seed=0, run_id=run_id))
        recorder.flush()
    assert report.count(EpisodeStatus.SUCCEEDED) == 7 and report.count(EpisodeStatus.FAILED) == 1
    failed = list_episodes(engine, EpisodeFilter(run_id=run_id, status="failed")).items
    assert len(failed) == 1 and failed[0]["task_id"] == tasks[3].id
    detail = get_episode(engine, failed[0]["id"])
    assert detail["error_stage"] == "actor turn 0" and "500" in detail["error"]
    ok = list_episodes(engine, EpisodeFilter(run_id=run_id, status="succeeded"), limit=100)
    assert ok.total == 7
    # the calculator solves level-1 problems from their numbers only partly; metrics come from the store
    metrics = run_metrics(engine, run_id)
    assert metrics["critic_accuracy"] is not None
    assert 0.0 <= metrics["pass@turn-1"] <= 1.0
    assert metrics["pass@turn-1"] == pytest.approx(sum(e.outcome["first_correct"] for e in report.episodes
                                                       if e.status == EpisodeStatus.SUCCEEDED) / 7, abs=5e-5)


def test_slow_episode_times_out_and_the_rest_finish(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 's.db'}")
    tasks = load_tasks("arithmetic:1", n=3, seed=0, split="train")
    policies = _stalling_on(tasks[0], seconds=60)  # a 3 s timeout leaves the quick ones room on a loaded machine
    with Recorder(engine) as recorder:
        run_id = _run(recorder)
        report = asyncio.run(play(GAME, tasks, policies, recorder, concurrency=3, seed=0, run_id=run_id, timeout_s=3))
    assert [e.status for e in report.episodes] == [EpisodeStatus.TIMEOUT, EpisodeStatus.SUCCEEDED,
                                                    EpisodeStatus.SUCCEEDED]
    rows = list_episodes(engine, EpisodeFilter(run_id=run_id, status="timeout")).items
    assert len(rows) == 1 and rows[0]["error_stage"] == "actor turn 0"


def test_a_free_slot_starts_the_next_episode_and_keep_going_stops_new_starts(tmp_path):
    engine = open_store(f"sqlite:///{tmp_path / 'k.db'}")
    tasks = load_tasks("arithmetic:1", n=8, seed=0, split="train")
    policies = _stalling_on(tasks[0], seconds=4)  # room for five quick episodes on a loaded machine
    finished: list[str] = []
    asked = []

    def keep_going() -> bool:
        asked.append(True)
        return len(asked) <= 6

    with Recorder(engine) as recorder:
        run_id = _run(recorder)
        report = asyncio.run(play(GAME, tasks, policies, recorder, concurrency=2, seed=0, run_id=run_id,
                                  on_episode=lambda e: finished.append(e.task_id), keep_going=keep_going))
    # the other slot played tasks 1-5 while task 0 stalled; tasks 6 and 7 never started
    assert finished == [t.id for t in tasks[1:6]] + [tasks[0].id]
    assert sorted(e.task_id for e in report.episodes) == sorted(t.id for t in tasks[:6])
    assert len(list_episodes(engine, EpisodeFilter(run_id=run_id), limit=100).items) == 6


def test_interrupted_run_keeps_finished_episodes_and_fails_running_ones(store_url):
    """Cancel mid-run (what Ctrl-C does): finished episodes stay, none is left running or succeeded."""
    engine = open_store(store_url)
    tasks = load_tasks("arithmetic:1", n=6, seed=0, split="train")
    gate = asyncio.Event()

    async def hang_but_first(question: str) -> None:
        if tasks[0].question not in question:
            await gate.wait()  # every other episode hangs until cancelled

    policies = {"actor": Policy(Calculator(hang_but_first)), "critic": Policy(scripted_bot("always-correct"))}

    async def main(recorder, run_id):
        task = asyncio.create_task(play(GAME, tasks, policies, recorder, concurrency=6, seed=0, run_id=run_id,
                                        options=ReflectionOptions(turns=1)))
        while not list_episodes(engine, EpisodeFilter(run_id=run_id, status="succeeded")).total:
            recorder.flush()
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with Recorder(engine) as recorder:
        run_id = _run(recorder)
        asyncio.run(main(recorder, run_id))
        aborted = recorder.abort_running(run_id, "interrupted by the user")
    counts = {s: list_episodes(engine, EpisodeFilter(run_id=run_id, status=s)).total
              for s in ("succeeded", "failed", "running")}
    assert counts == {"succeeded": 1, "failed": 5, "running": 0} and aborted == 5


def test_turn_served_by_another_adapter_fails_the_episode(tmp_path):
    """A backend that serves a different adapter than the policy asked for is an error, never silent."""
    engine = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    tasks = load_tasks("arithmetic:1", n=2, seed=0, split="train")

    class StaleServer(ScriptedBackend):
        async def generate(self, request):
            result = await super().generate(request)
            return dataclasses.replace(result, served_by="actor@v1")

    stale = StaleServer(BOTS["calculator"], bot_name="calculator")
    asyncio.run(stale.load_adapter("actor@v2", "/adapters/actor@v2"))
    policies = {"actor": Policy(stale, adapter="actor@v2"), "critic": Policy(scripted_bot("always-correct"))}
    with Recorder(engine) as recorder:
        run_id = _run(recorder)
        report = asyncio.run(play(GAME, tasks, policies, recorder, concurrency=2, seed=0, run_id=run_id))
    assert [e.status for e in report.episodes] == [EpisodeStatus.FAILED] * 2
    assert "asked for 'actor@v2' but the backend served 'actor@v1'" in report.episodes[0].error
    assert report.episodes[0].error_stage == "actor turn 0"
