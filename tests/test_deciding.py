"""Evaluations that decide play on float32 twins of bfloat16 in-process backends, or on the
playing backend where it is batch-invariant (``graphs.policies.deciding``), on tiny random models."""

from __future__ import annotations

import asyncio

import pytest
import torch
from sqlalchemy import select
from tiny_model import save_random_lora, tiny_model, tiny_tokenizer

from app.settings import load_settings
from app.wiring import PolicyFactory
from evaluation.evaluator import Evaluator
from graphs.math_reflection.options import ReflectionOptions
from graphs.policies.base import SamplingParams
from graphs.policies.deciding import FloatTwins
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.policy import Policy
from graphs.registry import get_game, scripted_bot
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.models import Run

GAME = get_game("math-reflection")


def _backend(dtype: torch.dtype) -> InProcessBackend:
    tokenizer = tiny_tokenizer()
    return InProcessBackend(tiny_model(tokenizer).to(dtype), tokenizer, model_name="tiny", batch_wait_s=0.0)


def test_in_process_seats_play_on_a_float32_twin_with_their_adapters(tmp_path):
    async def scenario():
        playing = _backend(torch.bfloat16)
        folder = save_random_lora(tiny_model(tiny_tokenizer()), tmp_path / "actor-v1", seed=1)
        await playing.load_adapter("actor@v1", str(folder))
        loaded: list[InProcessBackend] = []

        def load(backend: InProcessBackend) -> InProcessBackend:
            loaded.append(_backend(torch.float32))
            return loaded[-1]

        twins = FloatTwins(load)
        sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
        bot = Policy(scripted_bot("always-correct"), sampling)
        try:
            mapped = await twins({"actor": Policy(playing, sampling, adapter="actor@v1"), "critic": bot})
            twin = mapped["actor"].backend
            assert len(loaded) == 1 and twin is loaded[0] and twin.precision == "float32"
            assert mapped["actor"].adapter == "actor@v1" and twin.adapters() == ["actor@v1"]
            assert twin.adapter_path("actor@v1") == folder.resolve()
            assert mapped["critic"] is bot  # not an in-process model: as given

            again = await twins({"actor": Policy(playing, sampling)})
            assert again["actor"].backend is twin and len(loaded) == 1  # one twin per playing backend

            await playing.unload_adapter("actor@v1")  # e.g. a rejected candidate
            await twins({"actor": Policy(playing, sampling)})
            assert twin.adapters() == []

            float32 = _backend(torch.float32)
            kept = await twins({"actor": Policy(float32, sampling)})
            assert kept["actor"].backend is float32 and len(loaded) == 1  # float32 already: no twin
            await float32.aclose()
        finally:
            await playing.aclose()
            for backend in loaded:
                await backend.aclose()

    asyncio.run(scenario())


def test_an_evaluation_that_decides_is_played_and_keyed_in_float32(tmp_path):
    async def scenario():
        engine = open_store(f"sqlite:///{tmp_path / 'deciding.db'}")
        playing = _backend(torch.bfloat16)
        twin = _backend(torch.float32)
        tasks = load_tasks("arithmetic", n=4, seed=0, split="heldout")
        evaluate = Evaluator(engine, GAME, tasks, seed=0, options=ReflectionOptions(turns=1), concurrency=4,
                             deciding=FloatTwins(lambda backend: twin))
        sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
        try:
            result = await evaluate({"actor": Policy(playing, sampling), "critic": Policy(playing, sampling)},
                                    label="gate")
        finally:
            await playing.aclose()
            await twin.aclose()
        assert playing.stats.requests == 0 and twin.stats.requests == 2 * len(tasks)
        with engine.connect() as conn:
            config = conn.execute(select(Run.config).where(Run.id == result.run_id)).scalar_one()
        assert {s["precision"] for s in config["evaluation"]["seats"].values() if "precision" in s} == {"float32"}

    asyncio.run(scenario())


@pytest.mark.parametrize(("eval_dtype", "pays", "deciding", "twins", "dtype"), [
    ("float32", True, False, True, "bfloat16"),  # retrain: games in the playing dtype, evaluations on twins
    ("float32", True, True, False, "float32"),  # eval, deploy: the models load in float32 at once
    ("same", False, False, False, "bfloat16"),  # evaluations in the playing dtype
    ("auto", True, False, False, "bfloat16"),  # batch-invariant bfloat16: evaluations play where games do
    ("auto", True, True, False, "bfloat16"),
    ("auto", False, False, True, "bfloat16"),  # bfloat16 not measured faster: float32 twins
    ("auto", False, True, False, "float32"),
])
def test_the_factory_says_what_evaluations_play_on(monkeypatch, eval_dtype, pays, deciding, twins, dtype):
    monkeypatch.setenv("SPARRING_EVAL_DTYPE", eval_dtype)
    monkeypatch.setenv("SPARRING_DTYPE", "bfloat16")
    monkeypatch.setenv("SPARRING_DEVICE", "cpu")
    monkeypatch.setattr("graphs.policies.deciding.bfloat16_pays", lambda cache_dir=None: pays)
    settings = load_settings()
    factory = PolicyFactory(settings, SamplingParams(), deciding=deciding)
    assert (factory.deciding_policies() is not None) == twins
    assert factory._dtype == dtype
