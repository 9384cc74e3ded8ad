"""textarena: two-player TextArena games played by sparring seats (graphs/textarena_games).

Every env sparring lists is played to its end by the scripted bots with the network cut off;
moves, textarena's invalid-move reports and final rewards are logged, measured and built into
datasets for the player seat, on SQLite and PostgreSQL, and through the CLI.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from cli_calls import cli, refused
from game_runs import play_one_run
from memory_sink import MemorySink
from model_logs import as_model_turns
from sqlalchemy import select

from graphs.episodes import play
from graphs.options import option_docs
from graphs.policies.base import BackendError, GenerationRequest, SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import scripted_bot
from graphs.tasks.base import TaskSourceError
from graphs.textarena_games import credit
from graphs.textarena_games.bots import BOTS, PASS, legal_moves
from graphs.textarena_games.envs import ENVS
from graphs.textarena_games.game import GAME
from graphs.textarena_games.prompts import SYSTEM
from graphs.textarena_games.session import EnvSession
from graphs.textarena_games.tasks import TEXTARENA_TASKS
from storage.engine import open_store
from storage.models import Judgment, Reward
from training.datasets import build_snapshot, load_snapshot

ROOT = Path(__file__).resolve().parents[1]
BABBLE = "Let me think about this game for a while."


def first_legal_after_a_babble(messages, request) -> str:
    """Answers its first prompt of a game with no move (textarena asks again), then plays the
    first listed move."""
    if BABBLE not in messages[-1]["content"]:
        return BABBLE
    return BOTS["textarena-first"](messages, request)


def babbler(messages, request) -> str:
    return BABBLE


def tasks(n: int, split: str = "train"):
    return TEXTARENA_TASKS.load("textarena", n=n, seed=0, split=split)


def scripted(bot) -> Policy:
    return Policy(ScriptedBackend.from_function(bot))


def play_in_memory(policies: dict[str, Policy], n: int, **options) -> tuple[list, MemorySink]:
    sink = MemorySink()
    report = asyncio.run(play(GAME, tasks(n), policies, sink, concurrency=4, seed=0,
                              options=GAME.make_options(options)))
    return report.episodes, sink


# --- pieces --------------------------------------------------------------------------------


def test_the_bots_read_the_moves_textarena_lists() -> None:
    assert legal_moves("[GAME] Current Board:\n 0 | 1\nAvailable Moves: '[0]', '[1]', '[8]'") == ["[0]", "[1]", "[8]"]
    assert legal_moves("[GAME] Your available actions are: '[check]', '[bet]'") == ["[check]", "[bet]"]
    assert legal_moves("Valid moves: '[0, 1]'\n[Player 1] [0, 1]\n[GAME] No valid moves - you may have to skip.") == []
    assert legal_moves("[GAME] Welcome to Nim! Remove objects with '[pile quantity]'.") is None
    request = GenerationRequest([], SamplingParams(seed=3))
    prompt = [{"role": "user", "content": "Available Moves: [X 0], [O 0], [X 1]"}]
    assert BOTS["textarena-first"](prompt, request) == "[X 0]"
    assert BOTS["textarena-random"](prompt, request) == random.Random(3).choice(["[X 0]", "[O 0]", "[X 1]"])
    assert BOTS["textarena-random"]([{"role": "user", "content": "Valid moves: none. No valid moves"}], request) == PASS
    with pytest.raises(BackendError, match="no line listing the legal moves"):
        BOTS["textarena-random"]([{"role": "user", "content": "Make your move."}], request)


def test_the_player_credit_is_the_outcome_less_one_for_an_invalid_move() -> None:
    class T:
        def __init__(self, turn_id, seat, rewards):
            self.turn_id, self.seat, self.rewards, self.selected, self.idx = turn_id, seat, rewards, True, 0

    turns = [T("a", "player", {credit.VALID: 0.0}), T("b", "opponent", {credit.VALID: 1.0}),
             T("c", "player", {credit.VALID: 1.0, credit.OUTCOME: 1.0, credit.WIN: 1.0, credit.FORFEIT: 0.0})]
    assert credit.player_credits(turns, "player") == {"a": 0.0, "c": 1.0}
    assert credit.player_credits(turns[:2], "player") == {}  # no outcome yet: no credit


def test_the_system_prompt_is_textarenas_and_the_env_help_names_every_env() -> None:
    from textarena.agents.basic_agents import STANDARD_GAME_PROMPT

    assert SYSTEM == STANDARD_GAME_PROMPT
    help_text = option_docs(GAME.options)["env"]
    assert all(env in help_text for env in ENVS)


def test_tasks_alternate_players_heldout_seeds_differ_and_a_bad_file_names_line_and_fix(tmp_path: Path) -> None:
    train, heldout = tasks(100), tasks(100, "heldout")
    assert Counter(t.meta["player"] for t in train) == {0: 50, 1: 50}
    assert not {t.meta["seed"] for t in train} & {t.meta["seed"] for t in heldout}
    assert len({GAME.first_prompt(t)[-1]["content"] for t in train}) == 100  # GRPO tells tasks apart by it
    good = tmp_path / "games.jsonl"
    good.write_text('{"seed": 7, "player": 1, "id": "g7"}\n')
    (task,) = TEXTARENA_TASKS.load(str(good), n=None, seed=0)
    assert (task.id, task.meta, task.split) == ("g7", {"seed": 7, "player": 1}, "eval")
    for line, message in (('{"question": "2 + 2?"}', "games.jsonl:1: not a textarena task (found: question)"),
                          ('{"seed": 7, "player": 2}', "games.jsonl:1: 'player' must be 0 or 1"),
                          ('{"seed": -1, "player": 0}', "'seed' must be a non-negative integer")):
        good.write_text(line + "\n")
        with pytest.raises(TaskSourceError, match=re.escape(message)):
            TEXTARENA_TASKS.load(str(good), n=None, seed=0)


def test_an_episode_draws_from_its_own_random_state_and_leaves_the_process_one_alone() -> None:
    def observations(sessions: list[EnvSession], moves: int) -> list[list[str]]:
        seen: list[list[str]] = [[] for _ in sessions]
        for _ in range(moves):  # the sessions take turns, as concurrent episodes do
            for i, session in enumerate(sessions):
                player, observation = session.observe()
                seen[i].append(observation)
                session.step(player, legal_moves(observation)[0])
        return seen

    random.seed(123)
    before = random.getstate()
    alone = observations([EnvSession("KuhnPoker-v0", seed=5)], 3)[0]
    together = observations([EnvSession("KuhnPoker-v0", seed=5), EnvSession("KuhnPoker-v0", seed=6)], 3)[0]
    assert alone == together
    assert random.getstate() == before


def test_the_game_spec_loads_without_importing_textarena() -> None:
    """The CLI reads every game's spec at start; importing textarena takes a second or more."""
    code = "import sys, graphs.registry as g; g.get_game('textarena'); print('textarena' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# --- played --------------------------------------------------------------------------------


@pytest.mark.parametrize("env", list(ENVS))
def test_every_env_plays_to_its_end_offline_with_the_bots(env: str, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError(f"{env} tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    policies = {"player": Policy(scripted_bot("textarena-random")), "opponent": Policy(scripted_bot("textarena-first"))}
    episodes, sink = play_in_memory(policies, 2, env=env)
    assert [e.status for e in episodes] == ["succeeded"] * 2, [e.error for e in episodes]
    assert sorted(e.outcome["players"]["player"] for e in episodes) == [0, 1]
    assert {r.value for r in sink.rewards if r.name == credit.VALID} == {1.0}  # listed moves are legal
    for e in episodes:
        rewards = e.outcome["rewards"]
        assert set(rewards.values()) <= {-1.0, 0.0, 1.0} and e.reward == rewards["player"]
        assert e.outcome["winner"] == (None if rewards["player"] == rewards["opponent"]
                                       else max(rewards, key=rewards.get))
    assert len(sink.judgments) == 2 and {j.judge_policy for j in sink.judgments} == {"textarena"}


def test_openings_make_the_tasks_of_an_env_without_chance_differ() -> None:
    """Two deterministic bots replay one tic-tac-toe game per side without openings; with them,
    each task's seed draws two opening moves, which the seats see as textarena reports them."""
    policies = {"player": Policy(scripted_bot("textarena-first")), "opponent": Policy(scripted_bot("textarena-first"))}

    def games(episodes, sink) -> set[tuple[tuple[str, str], ...]]:
        return {tuple((t.seat, t.response) for t in sink.turns if t.episode_id == e.episode_id) for e in episodes}

    episodes, sink = play_in_memory(policies, 12, openings=False)
    assert len(games(episodes, sink)) == 2 and all(e.outcome["opening"] == [] for e in episodes)
    episodes, sink = play_in_memory(policies, 12)
    assert len(games(episodes, sink)) > 6 and all(len(e.outcome["opening"]) == 2 for e in episodes)
    for e in episodes:
        first = next(t for t in sink.turns if t.episode_id == e.episode_id)
        assert all(f"[Player {p}] {move}" in first.messages[-1]["content"]
                   for p, move in enumerate(e.outcome["opening"]))


def test_an_invalid_move_is_asked_again_and_a_second_one_in_a_row_loses() -> None:
    policies = {"player": scripted(babbler), "opponent": Policy(scripted_bot("textarena-random"))}
    episodes, sink = play_in_memory(policies, 2)
    for e in episodes:
        assert e.status == "succeeded" and e.outcome["forfeited"] == ["player"] and e.outcome["winner"] == "opponent"
        assert e.outcome["invalid_moves"] == {"player": 2, "opponent": 0} and e.reward == -1.0
        retry = [t for t in sink.turns if t.episode_id == e.episode_id and t.seat == "player"][-1]
        assert "attempted an invalid move" in retry.messages[-1]["content"]
    ending = {(r.seat, r.name): r.value for r in sink.rewards if r.episode_id == episodes[0].episode_id
              and r.name != credit.VALID}
    assert ending == {("player", "outcome"): -1.0, ("player", "win"): 0.0, ("player", "forfeit"): 1.0,
                      ("opponent", "outcome"): 1.0, ("opponent", "win"): 1.0, ("opponent", "forfeit"): 0.0}


def test_played_logged_measured_and_built_for_the_player(store_url: str, tmp_path: Path) -> None:
    policies = {"player": scripted(first_legal_after_a_babble), "opponent": Policy(scripted_bot("textarena-random"))}
    engine = open_store(store_url)
    report, run_id = play_one_run(engine, GAME, tasks(8), policies)
    assert report.count("succeeded") == 8
    episodes = {e.episode_id: e for e in report.episodes}
    with engine.connect() as conn:
        rewards = list(conn.execute(select(Reward.episode_id, Reward.seat, Reward.name, Reward.value, Reward.turn_id)))
        judged = list(conn.execute(select(Judgment.episode_id, Judgment.winner_seat, Judgment.judge_policy)))
    assert {(e, w) for e, w, _ in judged} == {(e.episode_id, e.outcome["winner"]) for e in report.episodes}
    outcomes = {e: v for e, seat, name, v, _ in rewards if (seat, name) == ("player", credit.OUTCOME)}
    assert outcomes == {e: episodes[e].reward for e in episodes}
    player_moves = [v for _, seat, name, v, _ in rewards if (seat, name) == ("player", credit.VALID)]
    assert player_moves.count(0.0) == 8  # one babble per game, then textarena's second chance

    metrics = GAME.metrics(engine, run_id).metrics
    wins = [float(e.outcome["winner"] == "player") for e in report.episodes]
    assert metrics["win_rate"].value == pytest.approx(sum(wins) / 8) and metrics["win_rate"].n == 8
    assert metrics["win_rate"].low <= metrics["win_rate"].value <= metrics["win_rate"].high
    assert metrics["score"].value == pytest.approx(sum((e.reward + 1) / 2 for e in report.episodes) / 8)
    invalid = metrics["invalid_move_rate"]
    assert (invalid.value, invalid.n) == (pytest.approx(8 / len(player_moves)), len(player_moves))
    assert metrics["forfeit_rate"].value == 0.0 and set(metrics) == set(GAME.report_metrics)

    as_model_turns(store_url, "player")
    rows = {}
    for kind in ("sft", "ppo"):
        built = build_snapshot(engine, kind, "player", game="textarena", base_model="bundled", out_dir=tmp_path / kind)
        rows[kind] = list(load_snapshot(engine, built.id, role="player", base_model="bundled", kind=kind))
        assert rows[kind], kind
    assert all(r["prompt"][0] == {"role": "system", "content": SYSTEM} for kind in rows for r in rows[kind])
    babbles = [r for r in rows["ppo"] if r["completion"][0]["content"] == BABBLE]
    assert len(babbles) == 8 and all(r["reward"] == episodes[r["episode_id"]].reward - 1 for r in babbles)
    assert rows["sft"] and all(r["reward"] == 1.0 and episodes[r["episode_id"]].reward == 1.0 for r in rows["sft"])


# --- through the CLI ------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'ta.db'}")
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    return tmp_path


def test_played_and_built_from_the_cli_and_an_unknown_env_lists_the_envs(env: Path) -> None:
    message = refused("play", "textarena", "--env", "Chess-v0")
    assert f"unknown textarena env 'Chess-v0'; sparring plays: {', '.join(ENVS)}" in message
    assert "textarena-random, textarena-first" in refused("play", "textarena", "--seat", "opponent=scripted:chess")
    out = cli("play", "textarena", "-n", "6", "--env", "KuhnPoker-v0", "--seat", "player=scripted:textarena-first",
              "--format", "json")
    played = json.loads(out.strip().splitlines()[-1])[0]
    assert (played["succeeded"], played["invalid_move_rate"], played["forfeit_rate"]) == (6, 0.0, 0.0)
    assert 0 <= played["win_rate"] <= 1
    as_model_turns(f"sqlite:///{env / 'ta.db'}", "player")
    built = json.loads(cli("datasets", "build", "ppo", "--role", "player", "--game", "textarena", "--format",
                           "json"))[0]
    assert built["rows"] > 0, built
