"""The OpenAI-compatible backend against a local HTTP double of vLLM: retries, a server
restart, error mapping, adapters; and the settings that choose it. The real server is in
tests/test_vllm.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from sqlalchemy import select
from typer.testing import CliRunner
from uvicorn_thread import free_port
from vllm_double import EOS, VllmDouble

from app.cli import app
from app.settings import load_settings
from app.wiring import PolicyFactory, SeatSpecError, parse_seat_specs
from graphs.policies.base import (
    BackendError,
    Choice,
    ChoiceUnsupportedError,
    GenerationRequest,
    SamplingParams,
    UnknownAdapterError,
)
from graphs.policies.openai_backend import OpenAIBackend, RetryPolicy, with_retries
from graphs.registry import get_game
from storage.engine import open_store
from storage.models import Episode, EpisodePayload, Turn, TurnPayload

FAST = RetryPolicy(retries=4, initial_delay_s=0.01, max_delay_s=0.05)
HI = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture
def double():
    server = VllmDouble().start()
    yield server
    server.stop()


def backend(url: str, retry: RetryPolicy = FAST) -> OpenAIBackend:
    return OpenAIBackend(base_url=url, model_name="bundled", retry=retry)


def chats(double: VllmDouble) -> list[dict]:
    return [body for path, body in double.requests if path == "/v1/chat/completions"]


# --------------------------------------------------------------------------------- retry logic


def test_backoff_doubles_up_to_the_cap():
    policy = RetryPolicy(retries=8, initial_delay_s=0.5, max_delay_s=16.0)
    assert [policy.delay(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 16, 16]
    assert sum(policy.delay(n) for n in range(8)) > 45  # outlasts a vLLM restart on CPU (~40 s)
    with pytest.raises(ValueError, match="retries must be >= 0"):
        RetryPolicy(retries=-1)


def _status_error(status: int) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, request=request)
    return openai.APIStatusError(f"HTTP {status}", response=response, body=None)


@pytest.mark.parametrize(
    ("failures", "calls", "waits"),
    [
        ([503, 429, 500], 4, [0.5, 1.0, 2.0]),  # transient: retried until it works
        ([400], 1, []),  # a bad request is not retried
        ([502] * 5, 3, [0.5, 1.0]),  # retries exhausted: the last failure propagates
    ],
)
def test_with_retries_retries_transient_failures_only(failures, calls, waits):
    attempts: list[int] = []
    slept: list[float] = []

    async def call() -> str:
        attempts.append(1)
        if len(attempts) <= len(failures):
            raise _status_error(failures[len(attempts) - 1])
        return "ok"

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def run():
        return await with_retries(call, RetryPolicy(retries=2 if len(failures) == 5 else 3), sleep=sleep)

    if calls <= len(failures):
        with pytest.raises(openai.APIStatusError):
            asyncio.run(run())
    else:
        assert asyncio.run(run()) == "ok"
    assert len(attempts) == calls and slept == waits


# ----------------------------------------------------------------------- requests and results


def test_request_maps_sampling_and_result_keeps_ids_without_eos(double):
    sampling = SamplingParams(temperature=0.3, top_p=0.9, max_new_tokens=12, seed=7, stop=("\n\n",))
    result = asyncio.run(backend(double.url).generate(GenerationRequest(HI, sampling)))
    body = chats(double)[0]
    assert body["model"] == "bundled" and body["messages"] == HI
    assert (body["temperature"], body["top_p"], body["max_completion_tokens"], body["seed"]) == (0.3, 0.9, 12, 7)
    assert body["stop"] == ["\n\n"] and body["logprobs"] is True and body["return_token_ids"] is True
    assert result.text == "Answer: 5" and result.served_by == "bundled" and result.finish_reason == "stop"
    assert result.prompt_token_ids == [1, 2, 3]
    assert result.completion_token_ids == [100, 101] and EOS not in result.completion_token_ids
    assert result.logprobs == [-0.5, -0.5]


def test_seeds_can_be_left_out_for_servers_that_fail_on_them(double):
    unseeded = OpenAIBackend(base_url=double.url, model_name="bundled", retry=FAST, send_seeds=False)
    asyncio.run(unseeded.generate(GenerationRequest(HI, SamplingParams(temperature=0.8, seed=7))))
    assert "seed" not in chats(double)[0]


def test_a_hosted_api_gets_no_vllm_options_and_its_snapshot_name_is_the_model(double):
    double.base = "gpt-4o-mini"
    double.answer_model = "gpt-4o-mini-2024-07-18"
    hosted = OpenAIBackend(base_url=double.url, model_name="gpt-4o-mini", vllm=False, retry=FAST)
    result = asyncio.run(hosted.generate(GenerationRequest(HI, SamplingParams(temperature=0))))
    body = chats(double)[0]
    assert "return_token_ids" not in body and "seed" not in body and "stop" not in body
    assert result.served_by == "gpt-4o-mini"
    assert result.completion_token_ids == [] and result.prompt_token_ids == [] and len(result.logprobs) == 3
    with pytest.raises(BackendError, match="LoRA adapters need a vLLM server"):
        asyncio.run(hosted.load_adapter("actor@v1", "/tmp"))


def test_a_non_vllm_answer_to_a_vllm_backend_is_an_error(double, monkeypatch):
    monkeypatch.setattr(double, "chat", lambda body: VllmDouble.chat(double, {**body, "return_token_ids": False}))
    with pytest.raises(BackendError, match="returned no token ids.*vllm=False"):
        asyncio.run(backend(double.url).generate(GenerationRequest(HI)))


def test_transient_failures_are_retried_and_other_failures_say_what_happened(double):
    double.failures = [503, 500, 429]
    assert asyncio.run(backend(double.url).generate(GenerationRequest(HI))).text == "Answer: 5"
    assert len(chats(double)) == 4
    double.failures = [400]
    with pytest.raises(BackendError, match="HTTP 400: injected failure 400") as caught:
        asyncio.run(backend(double.url).generate(GenerationRequest(HI)))
    assert not isinstance(caught.value, UnknownAdapterError) and len(chats(double)) == 5


def test_unknown_adapter_and_unknown_base_model_errors_say_how_to_fix_them(double):
    with pytest.raises(UnknownAdapterError, match="'critic@v9' is not loaded.*load_adapter"):
        asyncio.run(backend(double.url).generate(GenerationRequest(HI, adapter="critic@v9")))
    wrong = OpenAIBackend(base_url=double.url, model_name="SmolLM2", retry=FAST)
    with pytest.raises(BackendError, match="model 'SmolLM2'.*serves: bundled.*SPARRING_SERVED_MODEL_NAME"):
        asyncio.run(wrong.generate(GenerationRequest(HI)))


def test_server_down_is_a_backend_error_after_the_retries():
    down = backend(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(BackendError, match="could not connect.*is the server running"):
        asyncio.run(down.generate(GenerationRequest(HI)))


def test_a_restarted_server_is_waited_for_and_its_forgotten_adapter_reloaded(double, tmp_path):
    """The server goes away while a request is pending and comes back without the adapters
    loaded at runtime: the request retries through the outage, reloads the adapter, succeeds."""
    folder = tmp_path / "actor@v1"
    folder.mkdir()
    patient = backend(double.url, retry=RetryPolicy(retries=12, initial_delay_s=0.05, max_delay_s=0.2))

    async def scenario():
        await patient.load_adapter("actor@v1", str(folder))
        double.stop()
        pending = asyncio.create_task(patient.generate(GenerationRequest(HI, adapter="actor@v1")))
        await asyncio.sleep(0.5)
        assert not pending.done()
        double.start()  # the same port, no adapters
        return await pending

    result = asyncio.run(scenario())
    assert result.served_by == "actor@v1" and result.text == "Answer: 5"
    loads = [body for path, body in double.requests if path == "/v1/load_lora_adapter"]
    assert loads == [{"lora_name": "actor@v1", "lora_path": str(folder)}] * 2
    assert double.loras == {"actor@v1": str(folder)}


# -------------------------------------------------------------------------------------- deploy


def test_load_is_idempotent_for_the_same_folder_and_refuses_another(double, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    live = backend(double.url)

    async def scenario():
        await live.load_adapter("critic@v2", str(first))
        await live.load_adapter("critic@v2", str(first))  # no-op
        # another process (no memory of the load) asks again: /v1/models' root says it is the same folder
        await backend(double.url).load_adapter("critic@v2", str(first))
        for who in (live, backend(double.url)):
            with pytest.raises(BackendError, match="already loaded from .*/a; adapter names are immutable"):
                await who.load_adapter("critic@v2", str(second))
        with pytest.raises(BackendError, match="could not load adapter 'x@v1': HTTP 404: .*No adapter found"):
            await live.load_adapter("x@v1", str(tmp_path / "missing"))

    asyncio.run(scenario())
    assert live.adapters() == ["critic@v2"] and double.loras == {"critic@v2": str(first)}


def test_unload_forgets_the_adapter_and_a_second_unload_is_fine(double, tmp_path):
    live = backend(double.url)

    async def scenario():
        await live.load_adapter("actor@v1", str(tmp_path))
        await live.unload_adapter("actor@v1")
        await live.unload_adapter("actor@v1")  # 404: already gone
        return await live.served_models()

    assert asyncio.run(scenario()) == ["bundled"] and live.adapters() == []


def test_a_server_without_runtime_lora_updating_is_named(double, monkeypatch, tmp_path):
    monkeypatch.setattr(double, "load", lambda body: (404, {"detail": "Not Found"}))
    with pytest.raises(BackendError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        asyncio.run(backend(double.url).load_adapter("actor@v1", str(tmp_path)))


def test_a_load_the_server_does_not_list_is_an_error(double, monkeypatch, tmp_path):
    monkeypatch.setattr(double, "load", lambda body: (200, "Success"))
    with pytest.raises(BackendError, match="GET /models does not list it"):
        asyncio.run(backend(double.url).load_adapter("actor@v1", str(tmp_path)))


def test_one_client_per_event_loop():
    """Episodes may run in several event loops (the GRPO trainer's rollouts): each gets a client."""
    live = backend("http://127.0.0.1:9/v1")

    async def clients() -> tuple:
        return live._client(), live._client()

    # the objects themselves, kept alive: a collected client's id() may be reused by the next one
    first, again = asyncio.run(clients())
    other, _ = asyncio.run(clients())
    assert first is again and other is not first


# ------------------------------------------------------------------------- settings and wiring


def test_settings_choose_the_backend_of_model_seats_and_hosted_seats(monkeypatch):
    monkeypatch.setenv("SPARRING_BACKEND", "vllm")
    monkeypatch.setenv("SPARRING_VLLM_URL", "http://10.0.0.5:8001/v1/")
    monkeypatch.setenv("SPARRING_REQUEST_RETRIES", "3")
    monkeypatch.setenv("SPARRING_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("SPARRING_OPENAI_API_KEY", "sk-test")
    settings = load_settings()
    factory = PolicyFactory(settings, SamplingParams())

    async def build():
        return await factory.policies({"actor": "model:base", "critic": "openai:gpt-4o-mini", "judge": "rules"})

    policies = asyncio.run(build())
    actor, critic = policies["actor"].backend, policies["critic"].backend
    assert isinstance(actor, OpenAIBackend) and actor.vllm and actor.base_url == "http://10.0.0.5:8001/v1"
    assert actor.model_name == "bundled" and actor.retry.retries == 3
    assert isinstance(critic, OpenAIBackend) and not critic.vllm and critic.model_name == "gpt-4o-mini"
    assert critic._api_key == "sk-test" and "sk-test" not in repr(settings)
    monkeypatch.setenv("SPARRING_SERVED_MODEL_NAME", "smol")
    assert load_settings().served_model == "smol"


def test_seat_defaults_from_settings_come_before_cli_seats(monkeypatch):
    game = get_game("math-reflection")
    monkeypatch.setenv("SPARRING_SEATS", json.dumps({"critic": "openai:gpt-4o-mini", "debater_b": "scripted:echo"}))
    assert parse_seat_specs(game, [])["critic"] == "openai:gpt-4o-mini"  # debater_b: not this game's, ignored
    assert parse_seat_specs(game, ["critic=scripted:always-correct"])["critic"] == "scripted:always-correct"
    with pytest.raises(SeatSpecError, match="SPARRING_SEATS 'critic': unknown policy 'gpt'"):
        parse_seat_specs(game, [], {"critic": "gpt"})
    with pytest.raises(SeatSpecError, match="name the model"):
        parse_seat_specs(game, ["critic=openai:"], {})


def test_verifier_the_old_name_of_rules_is_still_accepted():
    debate = get_game("debate")
    assert parse_seat_specs(debate, ["judge=verifier"], {})["judge"] == "rules"
    assert parse_seat_specs(debate, [], {"judge": "verifier"})["judge"] == "rules"  # SPARRING_SEATS
    assert parse_seat_specs(get_game("math-reflection"), ["judge=verifier"], {})["judge"] == "rules"
    with pytest.raises(SeatSpecError, match="only judge seats can be 'rules'"):
        parse_seat_specs(debate, ["debater_b=verifier"], {})


def _play(tmp_path, monkeypatch, url: str, *args: str, exit_code: int = 0) -> list:
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'play.db'}")
    monkeypatch.setenv("SPARRING_BACKEND", "vllm")
    monkeypatch.setenv("SPARRING_VLLM_URL", url)
    monkeypatch.setenv("SPARRING_REQUEST_RETRIES", "1")
    result = CliRunner().invoke(app, ["play", "math-reflection", "--turns", "1", "-c", "1", "--format", "json",
                                      "--seat", "critic=scripted:always-correct", *args])
    assert result.exit_code == exit_code, result.output
    engine = open_store(f"sqlite:///{tmp_path / 'play.db'}")
    with engine.connect() as conn:
        return conn.execute(
            select(Episode.status, EpisodePayload.error, Episode.error_stage)
            .join(EpisodePayload, EpisodePayload.episode_id == Episode.id)
            .order_by(Episode.started_at)
        ).all()


def test_server_down_marks_every_episode_failed_with_the_cause(tmp_path, monkeypatch):
    episodes = _play(tmp_path, monkeypatch, f"http://127.0.0.1:{free_port()}/v1", "-n", "3", exit_code=1)
    assert len(episodes) == 3 and {e.status for e in episodes} == {"failed"}
    assert all("could not connect" in e.error and "actor" in e.error_stage for e in episodes), episodes


def test_one_failed_request_fails_its_episode_and_the_batch_goes_on(tmp_path, monkeypatch, double):
    double.failures = [400]
    episodes = _play(tmp_path, monkeypatch, double.url, "-n", "3")
    assert [e.status for e in episodes] == ["failed", "succeeded", "succeeded"]
    assert "HTTP 400" in episodes[0].error
    engine = open_store(f"sqlite:///{tmp_path / 'play.db'}")
    with engine.connect() as conn:
        turns = conn.execute(select(Turn.backend, Turn.served_by, TurnPayload.completion_token_ids)
                             .join(TurnPayload, TurnPayload.turn_id == Turn.id).where(Turn.seat == "actor")).all()
    assert turns == [("openai", "bundled", [100, 101])] * 2


# --- constrained choice -------------------------------------------------------------------


def test_a_choice_request_asks_vllm_for_the_prefix_and_one_option_by_guided_choice(double):
    double.choose = 1
    choice = Choice((" correct", " incorrect"), prefix="Step two is off.\nVerdict:")
    request = GenerationRequest([{"role": "user", "content": "Check 3 + 4 = 8."}], SamplingParams(0.0), choice=choice)
    result = asyncio.run(backend(double.url).generate(request))

    body = chats(double)[-1]
    assert body["structured_outputs"] == {"choice": ["Step two is off.\nVerdict: correct",
                                                     "Step two is off.\nVerdict: incorrect"]}
    # no continued assistant message and no prompt_logprobs: vLLM CPU crashes on those with LoRA on
    assert "continue_final_message" not in body and "prompt_logprobs" not in body
    assert body["messages"] == request.messages
    assert "stop" not in body and body["top_p"] == 1.0
    assert (result.chosen, result.text) == (" incorrect", "Step two is off.\nVerdict: incorrect")
    assert result.prompt_token_ids == [1, 2, 3]
    assert result.completion_token_ids == [100, 101, 102, 103, 104, 105]  # prefix and option: 6 words
    assert result.logprobs == [-0.5] * 6


def test_a_choice_the_server_ignores_is_an_error(double):
    double.chat = lambda body: VllmDouble.chat(double, {k: v for k, v in body.items() if k != "structured_outputs"})
    request = GenerationRequest([{"role": "user", "content": "hi"}], choice=Choice(("A", "B")))
    with pytest.raises(BackendError, match="not one of"):
        asyncio.run(backend(double.url).generate(request))


def test_a_plain_openai_api_cannot_constrain_a_choice(double):
    plain = OpenAIBackend(base_url=double.url, model_name="bundled", vllm=False, retry=FAST)
    request = GenerationRequest([{"role": "user", "content": "hi"}], choice=Choice(("A", "B")))
    with pytest.raises(ChoiceUnsupportedError, match="SPARRING_BACKEND=vllm"):
        asyncio.run(plain.generate(request))
    assert chats(double) == []


# --- secrets ---------------------------------------------------------------------------------


def test_an_upstream_error_that_echoes_the_key_is_stored_and_printed_without_it(tmp_path, monkeypatch, double):
    key = "hosted-key-0123456789abcdef"  # not sk-like: only the configured value says it is a key
    other = "sk-proj-Zyx9876543210abcdef"
    double.chat = lambda body: (401, {"error": {
        "message": f"Incorrect API key provided: {key}. Header was 'Authorization: Bearer {key}'; "
                   f"did you mean {other}? Store at postgresql://app:hunter2secret@db:5432/x",
        "type": "invalid_request_error", "code": "invalid_api_key"}})
    db = tmp_path / "play.db"
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{db}")
    monkeypatch.setenv("SPARRING_OPENAI_BASE_URL", double.url)
    monkeypatch.setenv("SPARRING_OPENAI_API_KEY", key)
    result = CliRunner().invoke(app, ["play", "math-reflection", "-n", "2", "-c", "1", "--turns", "1",
                                      "--seat", "actor=openai:gpt-4o-mini",
                                      "--seat", "critic=scripted:always-correct"])
    assert result.exit_code == 1, result.output
    with open_store(f"sqlite:///{db}").connect() as conn:
        stored = conn.execute(select(EpisodePayload.error, EpisodePayload.outcome)).all()
    assert len(stored) == 2
    for error, outcome in stored:
        everything = error + json.dumps(outcome)
        assert "HTTP 401: Incorrect API key provided: ****" in error, error
        assert "Bearer ****" in error and "sk-****" in error and "postgresql://app:****@db" in error
        for secret in (key, other, "hunter2secret"):
            assert secret not in everything
    assert "Incorrect API key provided: ****" in result.output  # the printed first failure
    for secret in (key, other, "hunter2secret"):
        assert secret not in result.output
