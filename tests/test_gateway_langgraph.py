"""A LangGraph graph of two agents that sparring did not write (a solver and a reviewer, both
langchain-openai ChatOpenAI models) played against `sparring gateway`: every call is a turn."""

from __future__ import annotations

from typing import TypedDict

import openai
import pytest
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
