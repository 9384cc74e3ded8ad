"""Greedy answers replayed across the evaluations of one evaluator (``evaluation.replay``), on a
tiny random model served in-process."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy import select
from tiny_model import tiny_model, tiny_tokenizer

from evaluation.evaluator import Evaluator
from evaluation.replay import GreedyReplay
from graphs.math_reflection.options import ReflectionOptions
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.policy import Policy
from graphs.registry import get_game, scripted_bot
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.models import Episode, Turn, TurnPayload

GAME = get_game("math-reflection")


@pytest.fixture
def backend() -> Iterator[InProcessBackend]:
    tokenizer = tiny_tokenizer()
    backend = InProcessBackend(tiny_model(tokenizer), tokenizer, model_name="tiny", batch_wait_s=0.0)
    yield backend
    asyncio.run(backend.aclose())


def _turns(engine, run_id: str, seat: str) -> dict[str, str]:
    """task id -> response of ``seat``'s turns in a run."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(Episode.task_id, TurnPayload.response)
            .join(Turn, Turn.episode_id == Episode.id).join(TurnPayload, TurnPayload.turn_id == Turn.id)
            .where(Episode.run_id == run_id, Turn.seat == seat)
        ).all()
    return dict(rows)


def test_a_seat_both_evaluations_share_is_answered_once(tmp_path, backend):
    engine = open_store(f"sqlite:///{tmp_path / 'replay.db'}")
    tasks = load_tasks("arithmetic", n=6, seed=0, split="heldout")
    evaluate = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1), concurrency=6)
    actor = Policy(backend, SamplingParams(temperature=0.0, max_new_tokens=8))
    first = asyncio.run(evaluate({"actor": actor, "critic": Policy(backend, SamplingParams(max_new_tokens=6))},
                                 label="critic A"))
    served = backend.stats.requests
    assert served == 2 * len(tasks) and evaluate.replay.replayed == 0  # an answer and a review a task

    # another critic (its decoding differs, so the run is not reused): only its reviews are decoded
    second = asyncio.run(evaluate({"actor": actor, "critic": Policy(backend, SamplingParams(max_new_tokens=9))},
                                  label="critic B"))
    assert not second.reused and second.run_id != first.run_id
    assert backend.stats.requests - served == len(tasks)
    assert evaluate.replay.replayed == len(tasks)
    before, after = _turns(engine, first.run_id, "actor"), _turns(engine, second.run_id, "actor")
    assert after == before and len(after) == len(tasks)


def test_only_greedy_model_requests_are_replayed(backend):
    replay = GreedyReplay(max_answers=2)
    greedy = GenerationRequest([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.0, seed=1))
    sampled = GenerationRequest([{"role": "user", "content": "hi"}], SamplingParams(temperature=0.7, seed=1))
    assert replay.key(backend, sampled) is None
    # the seed does not decide a greedy answer; the adapter does
    assert replay.key(backend, greedy) == replay.key(backend, GenerationRequest(greedy.messages, SamplingParams(0.0)))
    assert replay.key(backend, greedy) != replay.key(backend, GenerationRequest(greedy.messages, greedy.sampling,
                                                                                 adapter="actor@v1"))
    bot = scripted_bot("always-correct")
    assert replay.wrap(bot) is bot  # a bot may keep state between calls
    wrapped = replay.wrap(backend)
    assert replay.wrap(backend) is wrapped and wrapped.name == "inprocess" and wrapped.model_name == "tiny"

    answers = [asyncio.run(wrapped.generate(GenerationRequest([{"role": "user", "content": text}],
                                                              SamplingParams(temperature=0.0, max_new_tokens=4))))
               for text in ("a", "b", "c", "a")]
    assert replay.replayed == 0  # at most two answers are kept: "a" was forgotten when "c" came
    again = asyncio.run(wrapped.generate(GenerationRequest([{"role": "user", "content": "a"}],
                                                           SamplingParams(temperature=0.0, max_new_tokens=4))))
    assert replay.replayed == 1 and again.completion_token_ids == answers[3].completion_token_ids
