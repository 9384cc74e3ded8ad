"""Hot swap through `sparring gateway`, tested in flight: `sparring adapters promote` deploys a new
version of a role while a request for the role is generating. The request in flight finishes on the
version it started with, the next request gets the new one, and each reply and logged turn names
the version whose weights produced it. A version the backend cannot serve is refused in OpenAI's
format, never served by the base model or another version in its place.

A tiny random base model, real PEFT LoRA versions in a real registry, the real app on uvicorn; the
model's worker is held inside a forward pass (``held_worker``) while the test deploys."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from cli_calls import cli
from gateway_lab import Lab, Served, held_worker, make_lab, serve
from tiny_model import tiny_config, tiny_tokenizer
from transformers import LlamaForCausalLM

from training.registry import active_version, get_version, promote

ASK = [{"role": "user", "content": "What is 2 + 3?"}]
WAIT_S = 120
"""how long a test waits for the gateway's threads before it fails (a bound, never a synchronisation)"""


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    """actor@v1 active, actor@v2 a candidate (random LoRAs of different seeds)."""
    lab = make_lab(tmp_path)
    lab.publish("actor", seed=1)
    lab.publish("actor", active=False, seed=2)
    return lab


def client_of(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)


def greedy(client: openai.OpenAI, model: str) -> dict[str, Any]:
    """A greedy reply of ``model`` to ASK: its text, token ids and ``sparring`` extras."""
    reply = client.chat.completions.create(model=model, messages=ASK, max_tokens=8, temperature=0)
    choice = reply.choices[0]
    return {"text": choice.message.content, "token_ids": choice.model_extra["token_ids"],
            **reply.model_extra["sparring"]}


def streamed(client: openai.OpenAI, model: str) -> dict[str, Any]:
    """``greedy``, streamed: the reply as its chunks carry it."""
    chunks = list(client.chat.completions.create(model=model, messages=ASK, max_tokens=8, temperature=0,
                                                 stream=True))
    parts = [c.choices[0] for c in chunks if c.choices]
    return {"text": "".join(p.delta.content or "" for p in parts),
            "token_ids": [i for p in parts for i in (p.model_extra or {}).get("token_ids", [])],
            **chunks[0].model_extra["sparring"]}


@contextmanager
def reaching_the_model(served: Served) -> Iterator[threading.Event]:
    """An event set once a request reaches the in-process backend: it asks for a generation, or
    for the adapter it needs to be loaded first (a load waits until the running batch ends)."""
    backend = served.gateway.names.factory.model_backend()
    reached = threading.Event()
    with pytest.MonkeyPatch.context() as patch:
        for name in ("generate", "load_adapter"):
            original = getattr(backend, name)

            async def spy(*args: Any, _original: Any = original) -> Any:
                reached.set()
                return await _original(*args)

            patch.setattr(backend, name, spy)
        yield reached


def deploy_while_generating(lab: Lab, served: Served) -> tuple[dict, dict]:
    """A streamed request for ``actor`` held in its first forward pass; meanwhile actor@v2 is
    promoted and the next request for ``actor`` reaches the model; then the worker goes on.
    Returns (the reply in flight, the next one)."""
    client = client_of(served)
    with ThreadPoolExecutor(2) as pool, held_worker(served) as (entered, release):
        in_flight = pool.submit(streamed, client, "actor")
        assert entered.wait(WAIT_S), "the request for actor never reached a forward pass"
        cli("adapters", "promote", "actor@v2", "--db", lab.settings.database_url)
        with reaching_the_model(served) as reached:
            following = pool.submit(greedy, client, "actor")
            assert reached.wait(WAIT_S), "the request after the deploy never reached the model"
        assert not in_flight.done()  # still held: the deploy happened while it was generating
        release.set()
        return in_flight.result(timeout=WAIT_S), following.result(timeout=WAIT_S)


@pytest.mark.parametrize("preloaded", [True, False], ids=["new-version-loaded-before", "new-version-loaded-on-demand"])
def test_a_deploy_while_a_request_generates_switches_only_the_requests_after_it(lab, preloaded):
    with serve(lab) as served:
        client = client_of(served)
        if preloaded:  # served by name before its deploy: the next request joins the batch in flight
            greedy(client, "actor@v2")
        old, new = deploy_while_generating(lab, served)
        pinned = {version: greedy(client, version) for version in ("actor@v1", "actor@v2")}
        served.flush()
    assert active_version(lab.engine, "actor").name == "actor@v2"
    assert pinned["actor@v1"]["token_ids"] != pinned["actor@v2"]["token_ids"]  # the versions answer differently
    for reply, version in ((old, "actor@v1"), (new, "actor@v2")):
        assert reply["served_by"] == version
        assert (reply["text"], reply["token_ids"]) == (pinned[version]["text"], pinned[version]["token_ids"])
        [turn] = lab.rows("SELECT served_by, policy, seat, response FROM turns JOIN turn_payloads "
                          "ON turn_payloads.turn_id = turns.id WHERE id = :t", t=reply["turn_id"])
        assert turn == {"served_by": version, "policy": f"{lab.settings.model}+{version}", "seat": "actor",
                        "response": reply["text"]}


def error_of(exc: pytest.ExceptionInfo) -> dict:
    """The error as the gateway sent it: OpenAI's {"error": {message, type, code, param}}."""
    body = exc.value.response.json()
    assert set(body) == {"error"} and {"message", "type", "code", "param"} <= set(body["error"])
    return body["error"]


def refused(client: openai.OpenAI, model: str, kind: type[openai.APIStatusError]) -> dict:
    with pytest.raises(kind) as exc:
        greedy(client, model)
    assert exc.value.response.headers["x-should-retry"] == "false"
    return error_of(exc)


def unloadable(lab: Lab) -> str:
    """A published version that passes the registry's checks (its files, the base model's name) but
    that PEFT cannot load: a LoRA for a model of another shape, recorded under the lab's base model."""
    config = tiny_config(tiny_tokenizer())
    config.hidden_size, config.intermediate_size = 32, 64
    return lab.register("actor", lab.lora(LlamaForCausalLM(config), "lora-other-shape", seed=3), active=False)


def test_a_version_that_cannot_be_served_is_refused_and_nothing_serves_in_its_place(lab):
    other_shape = unloadable(lab)
    deleted = lab.publish("actor", active=False, seed=4)
    shutil.rmtree(get_version(lab.engine, deleted).path)
    with serve(lab) as served:
        client = client_of(served)
        errors = {model: refused(client, model, openai.ConflictError) for model in (other_shape, deleted)}
        promote(lab.engine, deleted, eval={})  # the role's active version is now one that cannot be loaded
        errors["actor"] = refused(client, "actor", openai.ConflictError)
        unknown = refused(client, "actor@v9", openai.NotFoundError)
        still = greedy(client, "actor@v1")  # the failed loads left the model as it was
        served.flush()
    assert other_shape == "actor@v3" and deleted == "actor@v4"
    for model, error in errors.items():
        assert (error["code"], error["param"], error["type"]) == ("adapter_unavailable", "model", "conflict_error")
        assert error["message"].startswith(f"model {model!r} cannot be served")
        assert "Nothing else is served in its place" in error["message"]
    assert "could not load adapter folder" in errors[other_shape]["message"]
    assert "do not have the shapes" in errors[other_shape]["message"]
    assert "is missing (deleted or moved after publishing)" in errors[deleted]["message"]
    assert f"its active version {deleted}" in errors["actor"]["message"]
    assert unknown["code"] == "model_not_found" and "no adapter version has that name" in unknown["message"]
    assert still["served_by"] == "actor@v1"
    assert lab.rows("SELECT served_by FROM turns") == [{"served_by": "actor@v1"}]  # no refused call was logged


def test_models_lists_only_what_can_be_served(lab):
    other_shape = unloadable(lab)  # its folder checks out; only its load fails
    deleted = lab.publish("actor", active=False, seed=4)
    shutil.rmtree(get_version(lab.engine, deleted).path)
    changed = lab.publish("drafter", seed=5)  # the active version of its role, then overwritten
    (get_version(lab.engine, changed).path / "adapter_model.safetensors").write_bytes(b"not an adapter")
    with serve(lab) as served:
        client = client_of(served)
        listed = [m.id for m in client.models.list()]
        failed = refused(client, other_shape, openai.ConflictError)
        after_failed_load = [m.id for m in client.models.list()]
        also_refused = refused(client, changed, openai.ConflictError)
    assert listed == ["base", "actor", "actor@v1", "actor@v2", other_shape]
    assert after_failed_load == ["base", "actor", "actor@v1", "actor@v2"]
    assert "do not have the shapes" in failed["message"]
    assert "has changed since publishing" in also_refused["message"]  # listed or not, asking says why
