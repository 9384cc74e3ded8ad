"""`sparring serve` shows external games: episodes of games the registry does not know, logged by
`sparring gateway` (the real gateway, a tiny random model and a LoRA version behind it), are
listed, filtered by game and seat, and shown with their turns, rewards and judgments, by the
JSON API and the pages alike, on a real SQLite file and PostgreSQL database."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest
from conftest import POSTGRES_ENV, POSTGRES_SKIP_REASON
from factories import record_episode
from fastapi.testclient import TestClient
from gateway_lab import Lab, make_lab, serve

from app.server.app import create_app
from storage.recorder import Recorder
from storage.scratch import scratch_postgres_database

LOCAL = "http://127.0.0.1:8765"
EPISODE, SEAT = "X-Sparring-Episode", "X-Sparring-Seat"
ASK = [{"role": "user", "content": "What is 2 + 3?"}]


@dataclass
class Played:
    lab: Lab
    scored: str
    """an episode of "external": solver (solver@v1) and reviewer (base) turns, rewards, two judgments"""
    one_turn: str
    """a one-turn episode of "external" (a call that named no episode)"""
    left_open: str
    """an episode of "code-review" (another external game) no client ended: marked interrupted"""
    registered: str
    """an episode of math-reflection, a game the registry knows"""
    turns: list[str]
    """the turn ids of ``scored``, in order"""


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A SQLite file, then a fresh PostgreSQL database, for the whole module."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('viewer-external') / 'store.db'}"
        return
    if not os.environ.get(POSTGRES_ENV):
        pytest.skip(POSTGRES_SKIP_REASON)
    with scratch_postgres_database(os.environ[POSTGRES_ENV], prefix="sparring_test") as url:
        yield url


def play_scored(client: openai.OpenAI) -> tuple[str, list[str]]:
    """An episode of two seats, three turns, a reward on a turn and one for a seat, a preference
    between two turns and a rubric score; ended with a headline reward."""
    episode = client.post("/episodes", body={"task": {"id": "sum", "question": "What is 2 + 3?", "answer": "5"},
                                             "seats": ["solver", "reviewer"]}, cast_to=object)["id"]
    turns = [client.chat.completions.create(model=model, messages=ASK, max_tokens=4, temperature=0,
                                            extra_headers={EPISODE: episode, SEAT: seat}).model_extra["sparring"]
             ["turn_id"] for model, seat in (("solver", "solver"), ("base", "reviewer"), ("solver", "solver"))]
    for body in ({"turn_id": turns[0], "value": 1.0, "name": "correct"}, {"seat": "reviewer", "value": 0.25}):
        client.post(f"/episodes/{episode}/rewards", body=body, cast_to=object)
    for body in ({"preferred_turn_id": turns[0], "rejected_turn_id": turns[2], "rationale": "the first is shorter"},
                 {"rubric": "accuracy", "score": 0.75, "scored_seat": "solver", "judge_seat": "grader"}):
        client.post(f"/episodes/{episode}/judgments", body=body, cast_to=object)
    client.post(f"/episodes/{episode}/end", body={"reward": 1.0}, cast_to=object)
    return episode, turns


@pytest.fixture(scope="module")
def played(store_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Played]:
    lab = make_lab(tmp_path_factory.mktemp("lab"), store_url)
    lab.publish("solver")
    with Recorder(lab.engine, batch_size=8, flush_interval_s=0.01) as recorder:
        registered = record_episode(recorder, task_id="t0").start.id
    with serve(lab) as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
        scored, turns = play_scored(client)
        one_turn = client.completions.create(model="base", prompt="Count: 1, 2,", max_tokens=3).model_extra[
            "sparring"]["episode_id"]
        left_open = client.post("/episodes", body={"game": "code-review"}, cast_to=object)["id"]
        client.chat.completions.create(model="base", messages=ASK, max_tokens=3,
                                       extra_headers={EPISODE: left_open, SEAT: "drafter"})
    yield Played(lab, scored, one_turn, left_open, registered, turns)
    lab.engine.dispose()


@pytest.fixture
def viewer(played: Played) -> Iterator[TestClient]:
    with TestClient(create_app(played.lab.settings.database_url), base_url=LOCAL) as client:
        yield client


def ids(viewer: TestClient, query: str) -> set[str]:
    response = viewer.get(f"/api/episodes?{query}")
    assert response.status_code == 200, response.text
    return {item["id"] for item in response.json()["items"]}


def refusal(viewer: TestClient, query: str) -> dict:
    response = viewer.get(f"/api/episodes?{query}")
    assert response.status_code == 400, response.text
    return response.json()


def test_external_episodes_are_listed_and_filtered_by_game_and_seat(viewer, played):
    external = {played.scored, played.one_turn}
    assert ids(viewer, "") == {*external, played.left_open, played.registered}
    assert ids(viewer, "game=external") == external
    assert ids(viewer, "game=code-review") == {played.left_open}
    assert ids(viewer, "game=math-reflection") == {played.registered}
    assert ids(viewer, "game=external&seat=reviewer") == {played.scored}
    assert ids(viewer, "seat=drafter") == {played.left_open}  # a seat no game of the registry names
    assert ids(viewer, "game=code-review&status=failed") == {played.left_open}
    game = refusal(viewer, "game=externl")
    assert game["parameter"] == "game" and game["detail"].startswith("game: no such game 'externl'; use one of: ")
    assert "math-reflection" in game["detail"] and game["detail"].endswith(", code-review, external")
    seat = refusal(viewer, "game=external&seat=drafter")  # logged, but in another game
    assert seat["detail"] == "seat: no such seat 'drafter' in external; use one of: agent, reviewer, solver"
    assert refusal(viewer, "seat=goalkeeper")["parameter"] == "seat"


def test_an_external_episode_is_shown_with_its_turns_rewards_and_judgments(viewer, played, monkeypatch):
    episode = viewer.get(f"/api/episodes/{played.scored}?tokens=true").json()
    assert (episode["game"], episode["status"], episode["reward"], episode["task_id"]) == (
        "external", "succeeded", 1.0, "sum")
    model = played.lab.settings.model
    assert [(t["seat"], t["served_by"]) for t in episode["turns"]] == [
        ("solver", "solver@v1"), ("reviewer", model), ("solver", "solver@v1")]
    assert all(t["completion_token_ids"] for t in episode["turns"])
    assert {(r["seat"], r["turn_id"], r["value"]) for r in episode["rewards"]} == {
        ("solver", played.turns[0], 1.0), ("reviewer", None, 0.25)}
    assert [(j["preferred_turn_id"], j["rejected_turn_id"], j["score"]) for j in episode["judgments"]] == [
        (played.turns[0], played.turns[2], None), (None, None, 0.75)]

    page = viewer.get(f"/episodes/{played.scored}")
    assert page.status_code == 200, page.text
    assert "served by <code>solver@v1</code>" in page.text and f"served by <code>{model}</code>" in page.text
    assert "correct = 1" in page.text and "reviewer reward = 0.25" in page.text
    assert 'prefers <a href="#turn-0">turn #0</a> over <a href="#turn-2">turn #2</a>' in page.text
    assert "— the first is shorter" in page.text and "score 0.75 on accuracy for solver" in page.text
    judgments = re.findall(r'<p class="judgment">(.*?)</p>', page.text, re.S)
    assert len(judgments) == 2 and not any(re.search(r"\btie\b", j) for j in judgments)  # neither is a tie
    monkeypatch.setenv("SPARRING_MODEL", model)  # the token view decodes with the gateway's model
    tokens = viewer.get(f"/episodes/{played.scored}/turns/0/tokens")
    assert tokens.status_code == 200 and "unavailable" not in tokens.text
    assert tokens.text.count('title="id ') == len(episode["turns"][0]["completion_token_ids"])


def test_an_interrupted_external_episode_and_a_one_turn_one_are_shown(viewer, played):
    interrupted = viewer.get(f"/episodes/{played.left_open}")
    assert interrupted.status_code == 200 and "code-review" in interrupted.text
    assert "error at interrupted: interrupted: the gateway stopped" in interrupted.text
    one_turn = viewer.get(f"/api/episodes/{played.one_turn}").json()
    assert [t["messages"] for t in one_turn["turns"]] == [[{"role": "user", "content": "Count: 1, 2,"}]]
    assert viewer.get(f"/episodes/{played.one_turn}").status_code == 200


def test_the_episodes_page_offers_external_games_and_seats_and_keeps_the_filter(viewer, played):
    page = viewer.get("/?game=external&seat=solver")
    assert page.status_code == 200, page.text
    assert "<option selected>external</option>" in page.text and "<option>code-review</option>" in page.text
    assert "<option selected>solver</option>" in page.text and "<option>drafter</option>" in page.text
    assert played.scored[:8] in page.text and played.one_turn[:8] not in page.text  # no solver turn there
    fragment = viewer.get("/fragments/episodes?game=code-review")
    assert played.left_open[:8] in fragment.text and played.scored[:8] not in fragment.text
    assert fragment.headers["hx-push-url"] == "/?game=code-review"
