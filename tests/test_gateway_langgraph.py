"""A LangGraph graph of two agents that sparring did not write (a solver and a reviewer, both
langchain-openai ChatOpenAI models) played against `sparring gateway`: every call is a turn. The
example (examples/langgraph_review.py) is played, trained, gated by its own evaluation, deployed and
played again, by hand and by `sparring retrain`, on a tiny random model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

import openai
import pytest
from cli_calls import cli, refused
from gateway_lab import Lab, make_lab, serve

langchain_openai = pytest.importorskip("langchain_openai", reason="requirements-dev.txt installs langchain-openai")
from langgraph.graph import END, START, StateGraph  # noqa: E402


class Review(TypedDict):
    question: str
    answer: str
    verdict: str


def review_graph(base_url: str, episode: str):  # noqa: ANN201 (a compiled LangGraph graph)
    """Solver (the solver role's active adapter) answers, reviewer (the base model) judges the answer."""

    def agent(model: str, seat: str) -> langchain_openai.ChatOpenAI:
        return langchain_openai.ChatOpenAI(
            model=model, base_url=base_url, api_key="none", max_tokens=4, temperature=0, max_retries=0,
            default_headers={"X-Sparring-Episode": episode, "X-Sparring-Seat": seat})

    solver, reviewer = agent("solver", "solver"), agent("base", "reviewer")

    def solve(state: Review) -> dict[str, str]:
        return {"answer": solver.invoke(state["question"]).content}

    def review(state: Review) -> dict[str, str]:
        prompt = f"Question: {state['question']}\nAnswer: {state['answer']}\nIs the answer right?"
        return {"verdict": reviewer.invoke(prompt).content}

    graph = StateGraph(Review)
    graph.add_node("solve", solve)
    graph.add_node("review", review)
    graph.add_edge(START, "solve")
    graph.add_edge("solve", "review")
    graph.add_edge("review", END)
    return graph.compile()


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    lab = make_lab(tmp_path_factory.mktemp("langgraph"))
    lab.publish("solver")
    return lab


def test_a_langgraph_graph_of_two_chatopenai_agents_logs_each_call_as_a_turn(lab):
    with serve(lab, game="review") as served:
        client = openai.OpenAI(base_url=served.base_url, api_key="none", max_retries=0)
        episodes = [client.post("/episodes", body={"task": {"id": f"q{i}", "answer": str(i + 2)},
                                                   "seats": ["solver", "reviewer"]}, cast_to=object)["id"]
                    for i in range(2)]
        finals = [review_graph(served.base_url, e).invoke({"question": f"What is {i} + 2?", "answer": "",
                                                           "verdict": ""}) for i, e in enumerate(episodes)]
        for episode in episodes:
            client.post(f"/episodes/{episode}/end", body={"reward": 0.0}, cast_to=object)
        served.flush()
    for episode, final in zip(episodes, finals, strict=True):
        turns = lab.rows("SELECT seat, served_by, response, messages FROM turns JOIN turn_payloads "
                         "ON turn_payloads.turn_id = turns.id WHERE episode_id = :e ORDER BY idx", e=episode)
        assert [(t["seat"], t["served_by"]) for t in turns] == [("solver", "solver@v1"),
                                                               ("reviewer", lab.settings.model)]
        assert [t["response"] for t in turns] == [final["answer"], final["verdict"]]
        assert f"Answer: {final['answer']}" in turns[1]["messages"][-1]["content"]
    rows = lab.rows("SELECT game, status, num_turns FROM episodes ORDER BY started_at")
    assert rows == [{"game": "review", "status": "succeeded", "num_turns": 2}] * 2


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "langgraph_review.py"


@pytest.fixture
def review(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lab:
    """An empty lab, and the CLI's settings pointing at it."""
    lab = make_lab(tmp_path)
    settings = lab.settings
    for name, value in (("DATABASE_URL", settings.database_url), ("MODEL", settings.model), ("DEVICE", "cpu"),
                        ("DATA_DIR", str(settings.data_dir)), ("CACHE_DIR", str(settings.cache_dir))):
        monkeypatch.setenv(f"SPARRING_{name}", value)
    return lab


def play_example(lab: Lab, episodes: int, solver: str) -> list[str]:
    """The example's graph played through a gateway of the game "review"; returns the episodes' ids."""
    with serve(lab, game="review") as served:
        done = subprocess.run([sys.executable, str(EXAMPLE), "--episodes", str(episodes)], capture_output=True,
                              text=True, timeout=600, env={**os.environ, "SPARRING_GATEWAY_URL": served.base_url,
                                                           "SPARRING_GATEWAY_ROLE": "solver",
                                                           "SPARRING_GATEWAY_MODEL": solver})
        served.flush()
    assert done.returncode == 0, done.stderr
    return [line.split()[1] for line in done.stdout.splitlines()]


def served_by(lab: Lab, episodes: list[str], seat: str) -> set[str]:
    rows = lab.rows("SELECT episode_id, served_by FROM turns WHERE seat = :s", s=seat)
    return {r["served_by"] for r in rows if r["episode_id"] in episodes}


def headline_means(lab: Lab, run: str) -> float:
    rewards = [r["reward"] for r in lab.rows("SELECT reward FROM episodes WHERE run_id = :r", r=run)]
    return sum(rewards) / len(rewards)


@pytest.mark.slow  # many short processes: the example's runs, the gate's
def test_the_langgraph_example_is_played_trained_gated_deployed_and_played_again(review):
    review.publish("solver")  # solver@v1, a random LoRA, plays first
    played = play_example(review, 16, "solver")  # each training sum twice: siblings DPO pairs by score
    rows = review.rows("SELECT game, split, status, num_turns FROM episodes")
    assert len(played) == len(rows) == 16
    assert {(r["game"], r["split"], r["status"]) for r in rows} == {("review", "train", "succeeded")}
    assert all(r["num_turns"] in (2, 4) for r in rows)  # solve, review (and a revision and its review)
    assert served_by(review, played, "solver") == {"solver@v1"}
    assert served_by(review, played, "reviewer") == {review.settings.model}

    [trained] = json.loads(cli("train", "dpo", "--game", "review", "--role", "solver", "--max-steps", "1",
                               "--batch-size", "1", "--format", "json"))
    assert (trained["adapter"], trained["parent"]) == ("solver@v2", "solver@v1") and trained["rows"] >= 1
    [gate] = json.loads(cli("deploy", "solver", "--game", "review", "--eval-script", f"{sys.executable} {EXAMPLE}",
                            "--margin", "1", "--format", "json"))
    [kept] = review.rows("SELECT metrics FROM evaluations")
    figures = json.loads(kept["metrics"]) if isinstance(kept["metrics"], str) else kept["metrics"]
    cand, base = headline_means(review, figures["candidate_run"]), headline_means(review, figures["baseline_run"])
    assert (gate["candidate"], gate["baseline"], gate["decision"]) == ("solver@v2", "solver@v1", "promoted")
    assert (gate["candidate_value"], gate["baseline_value"]) == (pytest.approx(cand), pytest.approx(base))
    assert gate["reason"].startswith(f"promoted solver@v2 against solver@v1: reward {100 * (cand - base):+.1f} pts")
    assert "not worse by more than the margin (100 pts)" in gate["reason"]
    assert served_by(review, [e["id"] for e in review.rows("SELECT id FROM episodes WHERE run_id = :r",
                                                             r=figures["candidate_run"])], "solver") == {"solver@v2"}
    assert len(review.rows("SELECT id FROM episodes WHERE split = 'eval'")) == 12  # 6 held-out sums, twice

    again = play_example(review, 2, "solver")
    assert served_by(review, again, "solver") == {"solver@v2"}


@pytest.mark.slow  # the example's runs and a training process
def test_retrain_plays_trains_gates_and_deploys_an_external_game_with_the_example(review):
    script = f"{sys.executable} {EXAMPLE}"
    [outcome] = json.loads(cli("retrain", "--game", "review", "--roles", "solver", "--trainer", "dpo",
                               "--min-rows", "1", "--max-steps", "1", "--margin", "1", "--play-script",
                               f"{script} --episodes 16", "--eval-script", script, "--format", "json"))
    assert (outcome["role"], outcome["status"], outcome["candidate"], outcome["episodes"]) == (
        "solver", "promoted", "solver@v1", 16)
    assert outcome["detail"].startswith("promoted solver@v1 against base: reward")
    splits = review.rows("SELECT split, count(*) AS n FROM episodes GROUP BY split ORDER BY split")
    assert splits == [{"split": "eval", "n": 12}, {"split": "train", "n": 16}]
    [round_run] = review.rows("SELECT status, summary FROM runs WHERE config LIKE '%retrain round 1\"%'")
    assert round_run["status"] == "finished" and round_run["summary"]["roles"][0]["status"] == "promoted"
    again = play_example(review, 1, "solver")
    assert served_by(review, again, "solver") == {"solver@v1"}


def test_retrain_of_an_external_game_needs_both_scripts_and_its_roles(review):
    assert "give --play-script (plays training episodes) and --eval-script" in refused(
        "retrain", "--game", "review", "--roles", "solver", "--play-script", "true")
    assert "name the roles to train with --roles" in refused(
        "retrain", "--game", "review", "--play-script", "true", "--eval-script", "true")
    assert "--practice: game 'review' is external" in refused(
        "retrain", "--game", "review", "--roles", "solver", "--practice", "4", "--play-script", "true",
        "--eval-script", "true")
    assert "'math-reflection' is registered" in refused("retrain", "--play-script", "true", "--eval-script", "true")
