"""LLM judges on a rubric: the score or preference is logged with the judge's policy, the
rubric's name and the rationale, and stored in the judgments table; a judge answering
nonsense fails with the cause."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select
from unconstrained import UnconstrainedBackend

from graphs.context import EpisodeContext
from graphs.judges.rubric import Rubric, parse_better, parse_score
from graphs.judging import JudgeError, Side, judge_preference, judge_score
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.seats import Seat, SeatKind
from graphs.tasks.base import Task
from storage.models import Judgment
from storage.recorder import Recorder
from storage.records import EpisodeStart
from tests.memory_sink import MemorySink

FAIRNESS = Rubric("fairness", "How fair is the deal to both sides?", scale=5)
SEATS = {"judge": Seat("judge", SeatKind.JUDGE, "judges"), "writer": Seat("writer", SeatKind.LEARNER, "writes")}


def _context(bot, sink) -> EpisodeContext:
    backend = ScriptedBackend.from_function(bot, name="judgebot")
    return EpisodeContext(
        episode_id="e-1",
        task=Task(id="t", question="q", answer=None, source="test"),
        seats=SEATS,
        policies={"judge": Policy(backend, SamplingParams(temperature=0))},
        sink=sink,
        seed=1,
    )


def test_a_score_is_constrained_normalised_and_logged_with_its_rubric() -> None:
    sink = MemorySink()
    ctx = _context(lambda messages, request: "Quite fair, both gain.\nScore: 4", sink)
    scored = asyncio.run(judge_score(ctx, "judge", FAIRNESS, "deal: 3 books to A", scored_seat="writer", round=0))
    assert (scored.raw, scored.score) == (4, 0.75)
    [judgment] = sink.judgments
    assert (judgment.rubric, judgment.score, judgment.scored_seat) == ("fairness", 0.75, "writer")
    assert judgment.judge_policy == "scripted:judgebot" and "both gain" in judgment.rationale
    assert sink.turns[0].sampling["final_choice"]["chosen"] == "4"


def test_a_preference_names_the_preferred_and_rejected_turns() -> None:
    sink = MemorySink()
    ctx = _context(lambda messages, request: "The second keeps the facts.\nBetter: B", sink)
    a, b = Side("writer", "turn-a", "Once upon a time"), Side("writer", "turn-b", "Long ago")
    winner = asyncio.run(judge_preference(ctx, "judge", Rubric("creativity", "Which is livelier?"), "story", a, b,
                                          round=1))
    assert winner is b
    [judgment] = sink.judgments
    assert (judgment.preferred_turn_id, judgment.rejected_turn_id, judgment.rubric) == ("turn-b", "turn-a",
                                                                                          "creativity")


def test_a_judge_answering_nonsense_without_constraint_fails_with_the_cause() -> None:
    sink = MemorySink()
    backend = UnconstrainedBackend(lambda messages, request: "banana", bot_name="nonsense")
    ctx = _context(lambda m, r: "", sink)
    ctx.policies["judge"] = Policy(backend, SamplingParams(temperature=0))
    with pytest.raises(JudgeError, match="fairness.*banana"):
        asyncio.run(judge_score(ctx, "judge", FAIRNESS, "deal", scored_seat=None, round=0))
    assert sink.judgments == []


def test_parsers_take_the_last_line_on_the_scale() -> None:
    assert parse_score("Score: 2 ... **Score:** 5", FAIRNESS) == 5
    assert parse_score("Score: 7", FAIRNESS) is None
    assert parse_better("better: a") == "A" and parse_better("no idea") is None
    with pytest.raises(ValueError, match="scale"):
        Rubric("x", "?", scale=12)


def test_rubric_and_score_are_stored(store) -> None:
    recorder = Recorder(store)
    ctx = _context(lambda messages, request: "Score: 2", recorder)
    recorder.episode_started(EpisodeStart(id="e-1", run_id=None, game="negotiation", task_id="t", task_source="test",
                                          split=None, difficulty=None, seed=1, seats={}, task={"id": "t"}))
    asyncio.run(judge_score(ctx, "judge", FAIRNESS, "deal", scored_seat="writer", round=0))
    recorder.close()
    with store.connect() as conn:
        row = conn.execute(select(Judgment.rubric, Judgment.score, Judgment.scored_seat)).one()
    assert tuple(row) == ("fairness", 0.25, "writer")
