"""The debate game: (debater_a -> debater_b) x rounds -> judge -> end."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.context import EpisodeContext, GameOptions
from graphs.debate import nodes
from graphs.debate.state import State
from graphs.games import EpisodeOutcome, GameSpec
from graphs.seats import Seat, SeatKind
from graphs.tasks.base import Task

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode. The loop is bounded by ``options.rounds`` (2 steps a
round); LangGraph's default of 25 steps would cut debates of more than 11 rounds."""

SEATS = (
    Seat("debater_a", SeatKind.LEARNER, "Answers the question first in each round and argues for its answer."),
    Seat("debater_b", SeatKind.CONTEXT, "Answers second in each round and argues against Debater A."),
    Seat(
        "judge",
        SeatKind.JUDGE,
        "Picks the winner: a model when the seat has a policy, else the ground-truth verifier.",
        "verifier",
    ),
)


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("debater_a", nodes.debater_a)
    graph.add_node("debater_b", nodes.debater_b)
    graph.add_node("judge", nodes.judge)
    graph.add_edge(START, "debater_a")
    graph.add_edge("debater_a", "debater_b")
    graph.add_conditional_edges("debater_b", nodes.after_debater_b)
    graph.add_edge("judge", END)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)


def initial_state(task: Task, options: GameOptions) -> dict[str, Any]:
    return {"arguments": [], "decision": None}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: Debater A's win value (1 win, 0.5 tie, 0 loss)."""
    decision = state["decision"]
    final_correct = decision["final_correct"] or {}
    summary = {
        "winner": decision["winner"],
        "judged_by": decision["judged_by"],
        "final_answer_a": decision["final_answers"]["debater_a"],
        "final_answer_b": decision["final_answers"]["debater_b"],
        "a_correct": final_correct.get("debater_a"),
        "b_correct": final_correct.get("debater_b"),
        "rounds": sum(argument["seat"] == "debater_a" for argument in state["arguments"]),
    }
    return EpisodeOutcome(reward=nodes.win_value("debater_a", decision["winner"]), summary=summary)


GAME = GameSpec(
    name="debate",
    description="Two debaters answer a question and argue over rounds; a judge (verifier or model) picks the winner.",
    seats=SEATS,
    build=build,
    initial_state=initial_state,
    outcome=outcome,
)
