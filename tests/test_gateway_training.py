"""The loop trains agents sparring did not write: calls played through `sparring gateway` (the
real `openai` client, a tiny random model), rewarded over REST, read by `sparring episodes`,
`sparring export` and every dataset builder as episodes of the unregistered game "external",
trained with `sparring train`, promoted, and served to the next calls."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from cli_calls import cli, refused, unwrapped
from gateway_lab import Lab, client, make_lab, served  # noqa: F401 (module fixtures over `lab`)

from training.registry import promote

EPISODE, SEAT = "X-Sparring-Episode", "X-Sparring-Seat"


def ask(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("gateway-training"))


@pytest.fixture
def env(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's settings: the lab's store, tiny model and folders."""
    settings = lab.settings
    for name, value in (("DATABASE_URL", settings.database_url), ("MODEL", settings.model), ("DEVICE", "cpu"),
                        ("DATA_DIR", str(settings.data_dir)), ("CACHE_DIR", str(settings.cache_dir))):
        monkeypatch.setenv(f"SPARRING_{name}", value)


class Player:
    """Episodes of the external game played by one client, each call's reply kept by turn id."""

    def __init__(self, client: openai.OpenAI) -> None:
        self.client = client
        self.replies: dict[str, object] = {}

    def open(self, **body: object) -> str:
        return self.client.post("/episodes", body=body, cast_to=object)["id"]

    def call(self, episode: str, seat: str, question: str, model: str = "base") -> str:
        reply = self.client.chat.completions.create(model=model, messages=ask(question), max_tokens=5,
                                                    temperature=1.0, logprobs=True,
                                                    extra_headers={EPISODE: episode, SEAT: seat})
        turn = reply.model_extra["sparring"]["turn_id"]
        self.replies[turn] = reply
        return turn

    def reward(self, episode: str, value: float, **body: object) -> None:
        self.client.post(f"/episodes/{episode}/rewards", body={"value": value, **body}, cast_to=object)

    def end(self, episode: str) -> None:
        self.client.post(f"/episodes/{episode}/end", body={}, cast_to=object)


def build(kind: str, role: str) -> tuple[dict, list[dict]]:
    """`sparring datasets build KIND --game external --role ROLE`: its answer and its rows."""
    [built] = json.loads(cli("datasets", "build", kind, "--game", "external", "--role", role, "--since", "all",
                             "--format", "json"))
    return built, [json.loads(line) for line in Path(built["path"]).read_text().splitlines()]


def test_episodes_of_the_external_game_are_listed_exported_and_built_into_every_kind_of_rows(
        lab, served, client, env, tmp_path):
    play = Player(client)
    right = play.open(task={"id": "sum", "question": "2 + 3?", "answer": "5"}, seats=["solver", "reviewer"])
    first = play.call(right, "solver", "2 + 3?")
    play.call(right, "reviewer", "Is that right?")
    play.reward(right, 1.0, turn_id=first, name="correct")
    wrong = play.open(task={"id": "sum"})
    sibling = play.call(wrong, "solver", "2 + 3?")  # the same state as `first`, a worse reward: a DPO pair
    play.reward(wrong, 0.0, turn_id=sibling, name="correct")
    shared = play.open()  # an episode reward: the credit of each of the seat's turns
    spread = [play.call(shared, "solver", "4 + 4?"), play.call(shared, "solver", "And 5 + 5?")]
    play.reward(shared, 1.0, seat="solver")
    named = play.open()  # a turn the client named takes the credit alone
    unnamed, picked = play.call(named, "solver", "1 + 1?"), play.call(named, "solver", "1 + 2?")
    play.reward(named, 1.0, seat="solver")
    play.reward(named, 0.25, turn_id=picked)
    held_out = play.open(split="eval")  # evaluation data: never a row
    play.reward(held_out, 1.0, turn_id=play.call(held_out, "solver", "9 + 9?"))
    for episode in (right, wrong, shared, named, held_out):
        play.end(episode)
    open_one = play.open()  # not ended: not read
    play.reward(open_one, 1.0, turn_id=play.call(open_one, "solver", "7 + 7?"))
    served.flush()

    sft, sft_rows = build("sft", "solver")
    assert {r["turn_id"]: r["reward"] for r in sft_rows} == {first: 1.0, spread[0]: 1.0, spread[1]: 1.0}
    assert sft["skipped"] == {"below_threshold": 2, "no_reward": 1}  # sibling 0.0, picked 0.25; unnamed: none
    by_turn = {r["turn_id"]: r for r in sft_rows}
    assert by_turn[first]["completion"] == [{"role": "assistant", "content": play.replies[first].choices[0].message
                                             .content}]
    assert by_turn[first]["prompt"] == ask("2 + 3?") and by_turn[first]["task_id"] == "sum"

    _, [pair] = build("dpo", "solver")
    assert (pair["pair_kind"], pair["chosen_turn_id"], pair["rejected_turn_id"]) == ("group", first, sibling)
    assert pair["prompt"] == ask("2 + 3?")

    _, ppo_rows = build("ppo", "solver")
    assert {r["turn_id"] for r in ppo_rows} == {first, sibling, *spread, picked}
    for row in ppo_rows:
        choice = play.replies[row["turn_id"]].choices[0]
        assert row["completion_token_ids"] == choice.model_extra["token_ids"]
        assert row["behaviour_logprobs"] == pytest.approx([t.logprob for t in choice.logprobs.content])
        assert row["prompt_token_ids"] == play.replies[row["turn_id"]].model_extra["prompt_token_ids"]
    assert {r["group_size"] for r in ppo_rows if r["turn_id"] in (first, sibling)} == {2}

    _, kto_rows = build("kto", "solver")
    assert {r["turn_id"]: r["label"] for r in kto_rows} == {first: True, sibling: False, spread[0]: True,
                                                           spread[1]: True, picked: False}

    reviewed = json.loads(cli("episodes", "list", "--game", "external", "--seat", "reviewer", "--format", "json"))
    assert [e["id"] for e in reviewed] == [right]
    shown = json.loads(cli("episodes", "show", shared, "--format", "json"))
    assert [t["id"] for t in shown["turns"]] == spread
    assert [(r["seat"], r["turn_id"], r["value"]) for r in shown["rewards"]] == [("solver", None, 1.0)]
    path = tmp_path / "turns.jsonl"
    cli("export", str(path), "--game", "external", "--status", "succeeded")
    assert len(path.read_text().splitlines()) == 8
    assert unnamed not in {r["turn_id"] for r in ppo_rows}


def test_a_role_with_no_rewarded_turn_says_how_to_get_some_and_an_unknown_game_lists_the_logged_ones(
        served, client, env):
    play = Player(client)
    episode = play.open()
    play.call(episode, "drafter", "Write a word.")
    play.end(episode)
    served.flush()
    message = unwrapped(refused("datasets", "build", "sft", "--game", "external", "--role", "drafter", "--since",
                                "all"))
    assert "no_reward=1" in message and unwrapped("sparring gateway --game external") in message
    assert "external" in refused("episodes", "list", "--game", "externl")
    listed = json.loads(cli("episodes", "list", "--seat", "drafter", "--format", "json"))  # a seat no game declares
    assert [e["id"] for e in listed] == [episode]


def test_a_role_trained_on_its_gateway_calls_serves_the_next_ones(lab, served, client, env):
    play = Player(client)
    for reward in (1.0, 0.0, 1.0, 0.0):  # samples of one state: SFT keeps the best, DPO pairs best and worst
        episode = play.open(seats=["writer"])
        play.reward(episode, reward, turn_id=play.call(episode, "writer", "Name a colour."))
        play.end(episode)
    served.flush()

    [sft] = json.loads(cli("train", "sft", "--role", "writer", "--game", "external", "--max-steps", "1",
                           "--batch-size", "1", "--format", "json"))
    assert (sft["adapter"], sft["rows"], sft["parent"]) == ("writer@v1", 1, None)
    promote(lab.engine, "writer@v1", eval={})
    episode = play.open(seats=["writer"])
    turn = play.call(episode, "writer", "Name a colour.", model="writer")
    assert play.replies[turn].model_extra["sparring"]["served_by"] == "writer@v1"

    [dpo] = json.loads(cli("train", "dpo", "--role", "writer", "--game", "external", "--max-steps", "1",
                           "--batch-size", "1", "--format", "json"))
    assert (dpo["adapter"], dpo["rows"], dpo["parent"]) == ("writer@v2", 1, "writer@v1")
    promote(lab.engine, "writer@v2", eval={})
    after = play.call(episode, "writer", "Name a colour.", model="writer")
    play.end(episode)
    served.flush()
    logged = lab.rows("SELECT id, served_by FROM turns WHERE episode_id = :e ORDER BY idx", e=episode)
    assert [(t["id"], t["served_by"]) for t in logged] == [(turn, "writer@v1"), (after, "writer@v2")]
