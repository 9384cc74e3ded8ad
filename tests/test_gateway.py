"""`sparring gateway` played by the real `openai` client: a tiny random model and random LoRA
versions behind it, every call checked against what the SQLite store logged."""

from __future__ import annotations

import httpx
import openai
import pytest
from gateway_lab import Lab, Served, client, make_lab, serve, served  # noqa: F401 (module fixtures over `lab`)

EPISODE, SEAT, CONVERSATION = "X-Sparring-Episode", "X-Sparring-Seat", "X-Sparring-Conversation"
ASK = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = make_lab(tmp_path_factory.mktemp("gateway"))
    lab.publish("solver")
    return lab


def open_episode(client: openai.OpenAI, **body: object) -> str:
    return client.post("/episodes", body=body, cast_to=object)["id"]


def turns_of(lab: Lab, served: Served, episode: str) -> list[dict]:
    served.flush()
    return lab.rows("SELECT * FROM turns JOIN turn_payloads ON turn_payloads.turn_id = turns.id "
                    "WHERE episode_id = :e ORDER BY idx", e=episode)


def episode_row(lab: Lab, served: Served, episode: str) -> dict:
    served.flush()
    [row] = lab.rows("SELECT * FROM episodes JOIN episode_payloads ON episode_payloads.episode_id = episodes.id "
                     "WHERE id = :e", e=episode)
    return row


def test_models_lists_base_each_active_role_and_each_version(lab, client):
    lab.publish("drafter", active=False, seed=5)  # a candidate: served pinned only, its role has no active version
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "base" and ids.index("solver") < ids.index("solver@v1")
    assert "drafter@v1" in ids and "drafter" not in ids


def test_two_seats_of_an_episode_are_logged_turn_by_turn_with_tokens_and_rewards(lab, served, client):
    episode = open_episode(client, task={"id": "sum-2-3", "question": "What is 2 + 3?", "answer": "5"},
                           seats=["solver", "reviewer"])
    solved = client.chat.completions.create(model="solver", messages=ASK, max_tokens=6, temperature=0, logprobs=True,
                                            extra_headers={EPISODE: episode, SEAT: "solver"})
    review = [*ASK, {"role": "assistant", "content": solved.choices[0].message.content},
              {"role": "user", "content": "Is that right?"}]
    reviewed = client.chat.completions.create(model="base", messages=review, max_tokens=5, temperature=0,
                                              metadata={"episode_id": episode, "seat": "reviewer"})
    solver_turn = solved.model_extra["sparring"]["turn_id"]
    client.post(f"/episodes/{episode}/rewards", body={"turn_id": solver_turn, "value": 1.0, "name": "correct"},
                cast_to=object)
    ended = client.post(f"/episodes/{episode}/end", body={"reward": 1.0}, cast_to=object)

    assert ended == {"id": episode, "status": "succeeded", "num_turns": 2, "reward": 1.0}
    row = episode_row(lab, served, episode)
    assert (row["game"], row["status"], row["reward"], row["num_turns"], row["task_id"]) == (
        "external", "succeeded", 1.0, 2, "sum-2-3")
    first, second = turns_of(lab, served, episode)
    assert (first["seat"], first["served_by"], first["idx"]) == ("solver", "solver@v1", 0)
    assert (second["seat"], second["served_by"], second["idx"]) == ("reviewer", lab.settings.model, 1)
    choice = solved.choices[0]
    assert first["response"] == choice.message.content
    assert first["completion_token_ids"] == choice.model_extra["token_ids"] and len(first["completion_token_ids"]) > 0
    assert first["prompt_token_ids"] == solved.model_extra["prompt_token_ids"]
    assert first["logprobs"] == pytest.approx([t.logprob for t in choice.logprobs.content])
    assert solved.usage.completion_tokens == len(first["completion_token_ids"])
    assert second["messages"] == review and reviewed.choices[0].logprobs is None
    [reward] = lab.rows("SELECT * FROM rewards WHERE episode_id = :e", e=episode)
    assert (reward["turn_id"], reward["seat"], reward["name"], reward["value"]) == (solver_turn, "solver", "correct",
                                                                                    1.0)


def test_a_stream_carries_the_logged_reply_token_ids_and_usage(lab, served, client):
    stream = client.chat.completions.create(model="solver@v1", messages=ASK, max_tokens=6, temperature=0, stream=True,
                                            logprobs=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    ids = [i for c in chunks if c.choices for i in (c.choices[0].model_extra or {}).get("token_ids", [])]
    episode = chunks[0].model_extra["sparring"]["episode_id"]
    [turn] = turns_of(lab, served, episode)
    assert (turn["response"], turn["completion_token_ids"]) == (text, ids)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == turn["finish_reason"]
    assert chunks[-1].usage.completion_tokens == len(ids)
    assert episode_row(lab, served, episode)["status"] == "succeeded"  # a call without episode: a one-turn one


def test_text_completions_are_turns_with_legacy_logprobs(lab, served, client):
    done = client.completions.create(model="base", prompt="Count: 1, 2,", max_tokens=4, temperature=0, logprobs=0)
    [turn] = turns_of(lab, served, done.model_extra["sparring"]["episode_id"])
    assert turn["messages"] == [{"role": "user", "content": "Count: 1, 2,"}]
    assert done.choices[0].text == turn["response"]
    assert done.choices[0].logprobs.token_logprobs == pytest.approx(turn["logprobs"])
    assert len(done.choices[0].logprobs.tokens) == len(turn["completion_token_ids"])


def test_calls_of_one_conversation_share_an_episode_until_it_is_ended(lab, served, client):
    talk = {CONVERSATION: "chat-42"}
    first = client.chat.completions.create(model="solver", messages=ASK, max_tokens=3, extra_headers=talk)
    second = client.chat.completions.create(model="solver", messages=ASK, max_tokens=3, extra_headers=talk)
    episode = first.model_extra["sparring"]["episode_id"]
    assert second.model_extra["sparring"]["episode_id"] == episode
    assert [t["seat"] for t in turns_of(lab, served, episode)] == ["solver", "solver"]
    assert episode_row(lab, served, episode)["task_id"] == "chat-42"
    client.post(f"/episodes/{episode}/end", body={}, cast_to=object)
    third = client.chat.completions.create(model="solver", messages=ASK, max_tokens=3, extra_headers=talk)
    assert third.model_extra["sparring"]["episode_id"] != episode


def test_a_deploy_switches_new_calls_to_the_new_version_and_a_pinned_one_stays(lab, served, client):
    lab.publish("critic", seed=2)
    before = client.chat.completions.create(model="critic", messages=ASK, max_tokens=3)
    newer = lab.publish("critic", seed=3)
    after = client.chat.completions.create(model="critic", messages=ASK, max_tokens=3)
    pinned = client.chat.completions.create(model="critic@v1", messages=ASK, max_tokens=3)
    served_by = [r.model_extra["sparring"]["served_by"] for r in (before, after, pinned)]
    assert served_by == ["critic@v1", newer, "critic@v1"] and newer == "critic@v2"
    logged = [turns_of(lab, served, r.model_extra["sparring"]["episode_id"])[0]["served_by"]
              for r in (before, after, pinned)]
    assert logged == served_by


# --- bad input: OpenAI's error format, nothing logged lost -------------------------------------


def error_of(exc: pytest.ExceptionInfo) -> dict:
    """The error as the gateway sent it: OpenAI's {"error": {message, type, code, param}}."""
    body = exc.value.response.json()
    assert set(body) == {"error"} and {"message", "type", "code", "param"} <= set(body["error"])
    return body["error"]


def test_an_unknown_model_is_a_404_that_lists_the_served_ones(client):
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="judge", messages=ASK, max_tokens=2)
    error = error_of(exc)
    assert (error["code"], error["param"], error["type"]) == ("model_not_found", "model", "not_found_error")
    assert "Served: base, " in error["message"] and "solver, " in error["message"] and "solver@v1" in error["message"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="solver@v9", messages=ASK, max_tokens=2)


def test_a_call_for_an_ended_episode_is_a_409_and_its_turns_stay(lab, served, client):
    episode = open_episode(client, seats=["solver"])
    client.chat.completions.create(model="solver", messages=ASK, max_tokens=3, extra_headers={EPISODE: episode})
    client.post(f"/episodes/{episode}/end", body={"status": "failed", "error": "gave up"}, cast_to=object)
    retrying = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=2)
    with pytest.raises(openai.ConflictError) as exc:
        retrying.chat.completions.create(model="solver", messages=ASK, max_tokens=3, extra_headers={EPISODE: episode})
    assert error_of(exc)["code"] == "episode_ended" and exc.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.ConflictError):
        client.post(f"/episodes/{episode}/end", body={}, cast_to=object)
    row = episode_row(lab, served, episode)
    assert (row["status"], row["error_stage"], row["error"], row["num_turns"]) == ("failed", "client", "gave up", 1)
    assert len(turns_of(lab, served, episode)) == 1


def test_a_reward_for_a_turn_of_another_episode_is_refused(lab, served, client):
    mine, other = open_episode(client), open_episode(client)
    reply = client.chat.completions.create(model="base", messages=ASK, max_tokens=2, extra_headers={EPISODE: other})
    turn = reply.model_extra["sparring"]["turn_id"]
    with pytest.raises(openai.BadRequestError) as exc:
        client.post(f"/episodes/{mine}/rewards", body={"turn_id": turn, "value": 1.0}, cast_to=object)
    assert error_of(exc)["code"] == "turn_of_another_episode" and other in error_of(exc)["message"]
    with pytest.raises(openai.NotFoundError):
        client.post(f"/episodes/{mine}/rewards", body={"turn_id": "f" * 32, "value": 1.0}, cast_to=object)
    with pytest.raises(openai.BadRequestError) as exc:
        client.post(f"/episodes/{mine}/judgments", body={"preferred_turn_id": turn}, cast_to=object)
    assert error_of(exc)["param"] == "preferred_turn_id"
    served.flush()
    assert lab.rows("SELECT * FROM rewards WHERE episode_id = :e", e=mine) == []
    assert len(turns_of(lab, served, other)) == 1


def test_malformed_json_and_invalid_fields_are_400s_in_openai_format(served):
    broken = httpx.post(f"{served.base_url}/chat/completions", content=b'{"model": "base", "messages": [',
                        headers={"content-type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"
    missing = httpx.post(f"{served.base_url}/chat/completions", json={"model": "base"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "messages"
    assert httpx.post(f"{served.base_url}/episodes/nope/end", json={}).json()["error"]["code"] == "episode_not_found"


def test_max_tokens_beyond_the_limit_and_unservable_options_are_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="base", messages=ASK, max_tokens=65)
    assert error_of(exc)["code"] == "max_tokens_too_large" and "64" in error_of(exc)["message"]
    for options, param in (({"n": 2}, "n"), ({"top_logprobs": 3, "logprobs": True}, "top_logprobs")):
        with pytest.raises(openai.BadRequestError) as exc:
            client.chat.completions.create(model="base", messages=ASK, max_tokens=2, **options)
        assert error_of(exc)["param"] == param


def test_a_seat_the_episode_did_not_declare_is_refused(lab, served, client):
    episode = open_episode(client, seats=["solver"])
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="base", messages=ASK, max_tokens=2, extra_headers={EPISODE: episode})
    assert error_of(exc)["code"] == "unknown_seat" and "'agent'" in error_of(exc)["message"]
    assert turns_of(lab, served, episode) == []


def test_episodes_left_open_are_marked_interrupted_when_the_gateway_stops(lab):
    with serve(lab) as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
        episode = open_episode(client)
        client.chat.completions.create(model="solver", messages=ASK, max_tokens=2, extra_headers={EPISODE: episode})
        run = served.gateway.book.run_id
    [row] = lab.rows("SELECT status, error_stage, num_turns FROM episodes WHERE id = :e", e=episode)
    assert (row["status"], row["error_stage"]) == ("failed", "interrupted")
    [status] = lab.rows("SELECT status, summary FROM runs WHERE id = :r", r=run)
    assert status["status"] == "finished" and status["summary"] == {"episodes_not_ended": 1}
    assert len(lab.rows("SELECT id FROM turns WHERE episode_id = :e", e=episode)) == 1


def test_the_example_client_plays_an_episode_of_two_seats(lab, served):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "gateway_client.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env={"SPARRING_GATEWAY_URL": served.base_url, "PATH": ""})
    assert done.returncode == 0, done.stderr
    episode = done.stdout.split()[1].rstrip(":")
    row = episode_row(lab, served, episode)
    assert (row["status"], row["num_turns"], row["task"]["answer"]) == ("succeeded", 2, "42")
    assert [t["seat"] for t in turns_of(lab, served, episode)] == ["solver", "reviewer"]
    [reward] = lab.rows("SELECT name, turn_id FROM rewards WHERE episode_id = :e", e=episode)
    assert reward["name"] == "correct" and reward["turn_id"] == turns_of(lab, served, episode)[0]["id"]
