"""A LangGraph graph of two agents, a solver and a reviewer, played through `sparring gateway`.

Both agents are langchain-openai ``ChatOpenAI`` models whose ``base_url`` is the gateway: the
solver answers a sum, the reviewer checks the answer, and a rejected answer is revised once. The
script scores the solver's final answer, gives that score to the solver's turns (a reward for the
seat) and ends the episode with it as its headline reward. Run it by hand against `sparring
gateway`, or let sparring run it (docs/gateway.md, "Gate and retrain"):

    sparring gateway --game review &
    python examples/langgraph_review.py --episodes 32          # training episodes: each sum 4 times
    sparring train dpo --game review --role solver
    sparring deploy solver --game review --eval-script "python examples/langgraph_review.py"
    sparring retrain --game review --roles solver --trainer dpo \\
        --play-script "python examples/langgraph_review.py --episodes 32" \\
        --eval-script "python examples/langgraph_review.py"

It reads SPARRING_GATEWAY_URL (the gateway, default http://127.0.0.1:8766/v1),
SPARRING_GATEWAY_ROLE and SPARRING_GATEWAY_MODEL (the seat, solver or reviewer, and the model it
calls; the other seat calls ``base``) and SPARRING_GATEWAY_SPLIT: in split eval it plays the
held-out sums, each once and greedily, so that two versions are compared on the same tasks; in any
other, the training sums, sampled, each several times (answers to one prompt are the siblings DPO
pairs by score).
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Literal, TypedDict

from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from openai import OpenAI

URL = os.environ.get("SPARRING_GATEWAY_URL", "http://127.0.0.1:8766/v1")
API_KEY = os.environ.get("SPARRING_API_TOKEN", "none")
SPLIT = os.environ.get("SPARRING_GATEWAY_SPLIT")
MODELS = {"solver": "base", "reviewer": "base", os.environ.get("SPARRING_GATEWAY_ROLE", "solver"):
          os.environ.get("SPARRING_GATEWAY_MODEL", "base")}
TRAIN = [(a, b) for a in range(2, 6) for b in (3, 5)]
HELD_OUT = [(a, b) for a in range(11, 14) for b in (4, 6)]
"""sums training never sees: the gate's tasks"""
MAX_TOKENS = 16


class Review(TypedDict):
    question: str
    answer: str
    verdict: str
    attempts: int


def score(answer: str, truth: int) -> float:
    """1 for the right number first; a wrong answer earns at most 0.4 for keeping to the format
    asked (the number only), less the more words it has, so that even a weak model's answers
    differ in score."""
    number = re.search(r"-?\d+", answer)
    if number is not None and int(number.group()) == truth:
        return 1.0
    words = len(answer.split())
    return 0.4 / words if words else 0.0


def review_graph(episode: str, temperature: float):  # noqa: ANN201 (a compiled LangGraph graph)
    def agent(seat: str) -> ChatOpenAI:
        return ChatOpenAI(model=MODELS[seat], base_url=URL, api_key=API_KEY, max_tokens=MAX_TOKENS,
                          temperature=temperature, default_headers={"X-Sparring-Episode": episode,
                                                                    "X-Sparring-Seat": seat})

    solver, reviewer = agent("solver"), agent("reviewer")

    def solve(state: Review) -> dict[str, object]:
        prompt = f"{state['question']} Answer with the number only."
        if state["attempts"]:
            prompt += f"\nYour answer {state['answer']!r} was rejected: {state['verdict']!r}. Answer again."
        return {"answer": solver.invoke(prompt).content, "attempts": state["attempts"] + 1}

    def review(state: Review) -> dict[str, str]:
        prompt = f"Question: {state['question']}\nAnswer: {state['answer']}\nIs the answer right? Say yes or no."
        return {"verdict": reviewer.invoke(prompt).content}

    def after_review(state: Review) -> Literal["solve", "__end__"]:
        accepted = state["verdict"].strip().lower().startswith("yes")
        return END if accepted or state["attempts"] > 1 else "solve"

    graph = StateGraph(Review)
    graph.add_node("solve", solve)
    graph.add_node("review", review)
    graph.add_edge(START, "solve")
    graph.add_edge("solve", "review")
    graph.add_conditional_edges("review", after_review)
    return graph.compile()


def play(client: OpenAI, a: int, b: int, temperature: float) -> float:
    """One episode of the sum a + b; returns its score."""
    task = {"id": f"sum-{a}-{b}", "question": f"What is {a} + {b}?", "answer": str(a + b)}
    opened = {"task": task, "seats": ["solver", "reviewer"], **({"split": SPLIT} if SPLIT else {})}
    episode = client.post("/episodes", body=opened, cast_to=object)["id"]
    final = review_graph(episode, temperature).invoke({"question": task["question"], "answer": "", "verdict": "",
                                                      "attempts": 0})
    value = score(final["answer"], a + b)
    client.post(f"/episodes/{episode}/rewards", body={"seat": "solver", "name": "score", "value": value},
                cast_to=object)
    client.post(f"/episodes/{episode}/end", body={"reward": value}, cast_to=object)
    print(f"episode {episode} {task['id']}: {final['answer']!r} after {final['attempts']} attempts, score {value:.2f}")
    return value


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=None,
                        help="episodes to play, cycling through the sums (default: each sum of the split once)")
    args = parser.parse_args()
    held_out = SPLIT not in (None, "train")
    sums = HELD_OUT if held_out else TRAIN
    client = OpenAI(base_url=URL, api_key=API_KEY)
    for i in range(len(sums) if args.episodes is None else args.episodes):
        play(client, *sums[i % len(sums)], temperature=0.0 if held_out else 0.7)
