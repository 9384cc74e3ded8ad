"""`sparring gateway` under bad input, played by the real `openai` client against a real uvicorn
server and a tiny random model: a client that leaves while its call generates, replies that do
not fit the model's context, request fields the gateway does not serve, and a store that goes
away and comes back. Each answer is in OpenAI's error format, and nothing logged before is lost."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import openai
import pytest
from gateway_lab import Lab, Served, client, held_worker, make_lab, serve, served  # noqa: F401 (fixtures over `lab`)
from sqlalchemy import Connection, Engine, make_url, text

from graphs.policies.inprocess_batches import BackendStats
from storage.engine import open_store

ASK = [{"role": "user", "content": "What is 2 + 3?"}]
OTHER = [{"role": "user", "content": "Name a colour."}]
EPISODE = "X-Sparring-Episode"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("bad-input"))


def error_of(exc: pytest.ExceptionInfo) -> dict:
    """The error as the gateway sent it: OpenAI's {"error": {message, type, code, param}}."""
    body = exc.value.response.json()
    assert set(body) == {"error"} and {"message", "type", "code", "param"} <= set(body["error"])
    return body["error"]


def turn_count(lab: Lab, served: Served) -> int:
    served.flush()
    return len(lab.rows("SELECT id FROM turns"))


def logged_turn(lab: Lab, turn_id: str) -> dict:
    [row] = lab.rows("SELECT * FROM turns JOIN turn_payloads ON turn_payloads.turn_id = turns.id WHERE id = :t",
                     t=turn_id)
    return row


def prompt_ids(served: Served, messages: list[dict[str, str]]) -> list[int]:
    """The prompt's token ids as the gateway's in-process model reads them."""
    tokenizer = served.gateway.names.factory.model_backend().tokenizer
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])


def eventually(find: Callable[[], Any], within_s: float = 120) -> Any:
    """What ``find`` returns once it is not empty (for what the gateway does on its own thread)."""
    deadline = time.monotonic() + within_s
    while not (found := find()):
        assert time.monotonic() < deadline, f"nothing found within {within_s:.0f} s"
        time.sleep(0.05)
    return found


# --- a client that goes away while its call generates ------------------------------------------


async def leave_while_generating(served: Served, lab: Lab, entered: threading.Event,
                                 release: threading.Event) -> tuple[Any, dict]:
    """A streaming client leaves while the worker runs its call; another client calls meanwhile.
    Returns the other client's reply and the turn logged for the one that left."""
    async with openai.AsyncOpenAI(base_url=served.base_url, api_key="none", max_retries=0) as client:
        leaving = asyncio.create_task(client.chat.completions.create(
            model="base", messages=ASK, max_tokens=30, temperature=0, stream=True))
        assert await asyncio.to_thread(entered.wait, 120)
        staying = asyncio.create_task(client.chat.completions.create(model="base", messages=OTHER, max_tokens=5,
                                                                      temperature=0))
        leaving.cancel()  # the client goes away: its connection closes
        with suppress(asyncio.CancelledError):
            await leaving
        [cancelled] = await asyncio.to_thread(eventually, lambda: lab.rows(
            "SELECT * FROM turns JOIN turn_payloads ON turn_payloads.turn_id = turns.id "
            "WHERE finish_reason = 'cancelled'"))
        release.set()  # only now may the worker go on
        return await staying, cancelled


def test_a_client_that_leaves_mid_stream_has_its_generation_cancelled_and_its_turn_logged_as_such(lab):
    with serve(lab) as served:
        backend = served.gateway.names.factory.model_backend()
        backend.stats = BackendStats()
        with held_worker(served) as (entered, release):
            stayed, left = asyncio.run(leave_while_generating(served, lab, entered, release))
        served.flush()
        stats = backend.stats
        asked = prompt_ids(served, ASK)
    assert (left["response"], left["completion_token_ids"], left["logprobs"]) == ("", [], [])
    assert left["messages"] == ASK and left["prompt_token_ids"] == asked and left["served_by"] == lab.settings.model
    [episode] = lab.rows("SELECT status, error_stage FROM episodes WHERE id = :e", e=left["episode_id"])
    assert (episode["status"], episode["error_stage"]) == ("failed", "interrupted")
    kept = stayed.choices[0].model_extra["token_ids"]
    turn = logged_turn(lab, stayed.model_extra["sparring"]["turn_id"])
    assert (turn["finish_reason"], turn["completion_token_ids"]) == (stayed.choices[0].finish_reason, kept) and kept
    # the batch answered the client that stayed, and only it: the row of the one that left was dropped
    assert (stats.requests, stats.generated_tokens) == (1, len(kept))


# --- replies that do not fit the model's context -----------------------------------------------


def words(count: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": " ".join(["word"] * count)}]


def test_a_prompt_longer_than_the_context_is_a_400_that_names_its_length(lab, served, client):
    context = served.gateway.context
    messages = words(context)
    length = len(prompt_ids(served, messages))
    before = turn_count(lab, served)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="base", messages=messages, max_tokens=2)
    error = error_of(exc)
    assert (error["code"], error["param"]) == ("context_length_exceeded", "messages")
    assert f"the prompt is {length} tokens and the model's context {context} tokens" in error["message"]
    with pytest.raises(openai.BadRequestError) as exc:
        client.completions.create(model="base", prompt=messages[0]["content"])
    assert (error_of(exc)["code"], error_of(exc)["param"]) == ("context_length_exceeded", "prompt")
    assert turn_count(lab, served) == before


def test_max_tokens_beyond_what_the_context_leaves_is_refused_and_a_request_asking_none_gets_what_fits(
        lab, served, client):
    context = served.gateway.context
    messages = words(context - 60)
    length = len(prompt_ids(served, messages))
    left = context - length
    assert 0 < left < served.gateway.max_tokens  # the context, not the gateway's limit, is what bounds the reply
    for param in ("max_tokens", "max_completion_tokens"):
        with pytest.raises(openai.BadRequestError) as exc:
            client.chat.completions.create(model="base", messages=messages, **{param: left + 1})
        error = error_of(exc)
        assert (error["code"], error["param"]) == ("context_length_exceeded", param)
        assert (f"the prompt is {length} tokens of the model's context of {context}, which leaves {left} for the "
                f"reply. Ask {param} of at most {left}") in error["message"]
    fitted = client.chat.completions.create(model="base", messages=messages, max_tokens=left, temperature=1.0)
    unasked = client.chat.completions.create(model="base", messages=messages, temperature=1.0)
    served.flush()
    for reply in (fitted, unasked):
        turn = logged_turn(lab, reply.model_extra["sparring"]["turn_id"])
        assert turn["sampling"]["max_new_tokens"] == left and 0 < len(turn["completion_token_ids"]) <= left


# --- request fields the gateway does not serve --------------------------------------------------

TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(("options", "param"), [
    ({"n": 2}, "n"),
    ({"logprobs": True, "top_logprobs": 3}, "top_logprobs"),
    ({"tools": [TOOL]}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"presence_penalty": -1.0}, "presence_penalty"),
    ({"logit_bias": {"42": 10}}, "logit_bias"),
    ({"modalities": ["text", "audio"]}, "modalities"),
    ({"reasoning_effort": "high"}, "reasoning_effort"),
    ({"extra_body": {"top_k": 5}}, "top_k"),
    ({"extra_body": {"guided_choice": ["yes", "no"]}}, "guided_choice"),
])
def test_a_chat_field_the_gateway_does_not_serve_is_a_400_naming_it_and_what_is_served(
        lab, served, client, options, param):
    before = turn_count(lab, served)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="base", messages=ASK, max_tokens=2, **options)
    error = error_of(exc)
    assert (error["code"], error["param"]) == ("unsupported_parameter", param)
    assert error["message"].startswith(f"{param}=") and "is not served by the gateway; it serves " in error["message"]
    assert turn_count(lab, served) == before


@pytest.mark.parametrize(("options", "param"), [
    ({"logprobs": 2}, "logprobs"), ({"echo": True}, "echo"), ({"suffix": "!"}, "suffix"), ({"best_of": 3}, "best_of"),
])
def test_a_completions_field_the_gateway_does_not_serve_is_a_400_naming_it(client, options, param):
    with pytest.raises(openai.BadRequestError) as exc:
        client.completions.create(model="base", prompt="Count: 1, 2,", max_tokens=2, **options)
    assert (error_of(exc)["code"], error_of(exc)["param"]) == ("unsupported_parameter", param)


def test_neutral_values_of_unserved_fields_are_served(client):
    reply = client.chat.completions.create(
        model="base", messages=ASK, max_tokens=2, n=1, tool_choice="none", response_format={"type": "text"},
        frequency_penalty=0, presence_penalty=0, logprobs=True, top_logprobs=0, user="someone", store=False,
        extra_body={"top_k": -1, "return_token_ids": True})
    assert len(reply.choices[0].logprobs.content) == len(reply.choices[0].model_extra["token_ids"])


def test_an_assistant_message_with_tool_calls_is_refused(client):
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    messages = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "user", "content": "?"}]
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="base", messages=messages, max_tokens=2)
    assert (error_of(exc)["code"], error_of(exc)["param"]) == ("unsupported_message", "messages[1].tool_calls")


# --- a store that goes away and comes back -----------------------------------------------------


@contextmanager
def sqlite_gone(path: Path, engine: Engine) -> Iterator[None]:
    """The SQLite file replaced by a folder, which SQLite cannot open ("unable to open database
    file"). The pool's connections are closed first, so that the gateway's next reads and writes
    connect again: tests run as root, whom a read-only file would not stop."""
    engine.dispose()
    moved = [(f, f.with_name(f.name + ".away")) for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
             if f.exists()]
    for file, away in moved:
        file.rename(away)
    path.mkdir()
    try:
        yield
    finally:
        path.rmdir()
        for file, away in moved:
            away.rename(file)


@contextmanager
def postgres_admin() -> Iterator[Connection]:
    """A connection to the test server's own database (not the test's), in autocommit."""
    server = open_store(os.environ["SPARRING_TEST_POSTGRES_URL"], migrate=False)
    try:
        with server.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
            yield conn
    finally:
        server.dispose()


def terminate_connections(admin: Connection, database: str) -> int:
    """pg_terminate_backend on every connection to ``database``: the gateway's are all there is."""
    return admin.execute(text("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = :d"),
                         {"d": database}).scalar_one()


@contextmanager
def postgres_gone(database: str) -> Iterator[None]:
    """The test's own PostgreSQL database closed to connections, and the gateway's connections
    terminated, as a restart would; the server goes on for everyone else."""
    with postgres_admin() as admin:
        admin.exec_driver_sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS false')
        try:
            terminate_connections(admin, database)
            yield
        finally:
            admin.exec_driver_sql(f'ALTER DATABASE "{database}" ALLOW_CONNECTIONS true')


def outage(lab: Lab) -> Any:
    """The lab's store unreachable while the block runs."""
    url = make_url(lab.settings.database_url)
    if url.get_backend_name() == "sqlite":
        return sqlite_gone(Path(url.database), lab.engine)
    return postgres_gone(url.database)


def refusal(call: Callable[[], object]) -> tuple[int, dict, str | None]:
    """The status, the error and the x-should-retry header of a call the gateway refuses."""
    with pytest.raises(openai.APIStatusError) as exc:
        call()
    return exc.value.status_code, error_of(exc), exc.value.response.headers.get("x-should-retry")


def test_requests_get_a_503_while_the_store_is_away_and_succeed_once_it_is_back(store_url, tmp_path):
    lab = make_lab(tmp_path, store_url)
    with serve(lab) as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)

        def play(**headers: str) -> Any:
            return client.chat.completions.create(model="base", messages=ASK, max_tokens=2, extra_headers=headers)

        episode = client.post("/episodes", body={}, cast_to=object)["id"]
        first = play(**{EPISODE: episode}).model_extra["sparring"]["turn_id"]
        with outage(lab):
            refused = [refusal(lambda: play(**{EPISODE: episode})),  # generated; its turn cannot be logged
                       refusal(play),  # a one-turn episode: cannot be opened
                       refusal(client.models.list)]  # a read
        second = play(**{EPISODE: episode}).model_extra["sparring"]["turn_id"]
        alone = play().model_extra["sparring"]["episode_id"]
        ended = client.post(f"/episodes/{episode}/end", body={}, cast_to=object)
        outages = served.gateway.book.ledger.outages
    for status, error, retry in refused:
        assert (status, error["code"], error["type"], retry) == (503, "store_unavailable", "service_unavailable", None)
        assert error["message"].startswith("the store (database) is unreachable (")
    assert outages >= 1  # the Recorder that met the outage was replaced by a fresh one
    assert ended["num_turns"] == 2
    logged = lab.rows("SELECT id, idx FROM turns WHERE episode_id = :e ORDER BY idx", e=episode)
    assert [(t["id"], t["idx"]) for t in logged] == [(first, 0), (second, 1)]
    statuses = lab.rows("SELECT id, status FROM episodes WHERE id IN (:a, :b) ORDER BY id", a=episode, b=alone)
    assert {r["id"]: r["status"] for r in statuses} == {episode: "succeeded", alone: "succeeded"}
    lab.engine.dispose()


def test_postgres_connections_terminated_under_the_gateway_are_replaced(postgres_url, tmp_path):
    lab = make_lab(tmp_path, postgres_url)
    database = make_url(postgres_url).database
    with serve(lab) as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
        first = client.chat.completions.create(model="base", messages=ASK, max_tokens=2)
        served.flush()
        with postgres_admin() as admin:
            dropped = terminate_connections(admin, database)
        second = client.chat.completions.create(model="base", messages=ASK, max_tokens=2)
        served.flush()
    assert dropped >= 1
    ids = [r.model_extra["sparring"]["turn_id"] for r in (first, second)]
    assert sorted(r["id"] for r in lab.rows("SELECT id FROM turns")) == sorted(ids)
    lab.engine.dispose()
