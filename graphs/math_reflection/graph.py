"""The math-reflection game: actor -> judge -> critic -> (actor -> judge -> critic)* -> end.

The critic reviews every answer, the last one included, even with ``turns=1``: its verdict
accuracy is then measured on every episode, and the final review is critic training data
although no refinement follows it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from langgraph.graph import START, StateGraph

from graphs.context import EpisodeContext, GameOptions
from graphs.games import EpisodeOutcome, GameSpec
from graphs.math_reflection import nodes
from graphs.math_reflection.state import State
from graphs.seats import Seat, SeatKind
from graphs.tasks.base import Task

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode. The loop is bounded by ``options.turns`` (3 steps a
turn); LangGraph's default of 25 steps would cut episodes of more than 8 turns."""

SEATS = (
    Seat("actor", SeatKind.LEARNER, "Solves the problem, then refines its answer from the critique."),
    Seat("critic", SeatKind.LEARNER, "Reviews each answer and says 'Verdict: correct' or 'Verdict: incorrect'."),
    Seat("judge", SeatKind.JUDGE, "Checks each answer against the ground truth (no model call).", "verifier"),
)


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("actor", nodes.actor)
    graph.add_node("judge", nodes.judge)
    graph.add_node("critic", nodes.critic)
    graph.add_edge(START, "actor")
    graph.add_edge("actor", "judge")
    graph.add_edge("judge", "critic")
    graph.add_conditional_edges("critic", nodes.after_critic)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)


def initial_state(task: Task, options: GameOptions) -> dict[str, Any]:
    return {"answers": [], "correct": [], "critiques": []}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: correctness of the final answer (None without ground truth)."""
    answers = [answer["value"] for answer in state["answers"]]
    correct: list[bool | None] = state["correct"]
    has_truth = correct[-1] is not None
    verdicts = [c["verdict_correct"] for c in state["critiques"] if c["verdict_correct"] is not None]
    summary = {
        "answers": answers,
        "correct_by_turn": correct,
        "first_correct": correct[0],
        "final_correct": correct[-1],
        "majority_correct": majority_correct(answers, correct) if has_truth else None,
        "verdicts": [c["verdict"] for c in state["critiques"]],
        "critic_accuracy": sum(verdicts) / len(verdicts) if verdicts else None,
    }
    return EpisodeOutcome(reward=float(correct[-1]) if has_truth else None, summary=summary)


def majority_correct(answers: list[str | None], correct: list[bool | None]) -> bool:
    """Whether the most frequent parsed answer is correct (a tie goes to the answer given
    last; no parsed answer at all counts as incorrect)."""
    counts = Counter(value for value in answers if value is not None)
    if not counts:
        return False
    last_position = {value: i for i, value in enumerate(answers) if value is not None}
    winner = max(counts, key=lambda value: (counts[value], last_position[value]))
    return bool(correct[last_position[winner]])


GAME = GameSpec(
    name="math-reflection",
    description="An actor solves a math problem, a critic reviews it, the actor refines; judged on ground truth.",
    seats=SEATS,
    build=build,
    initial_state=initial_state,
    outcome=outcome,
)
