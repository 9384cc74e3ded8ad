"""debate as a game: seats, options, outcome, rewards, metrics and gates."""

from __future__ import annotations

from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric
from graphs.credit import CORRECT
from graphs.debate.bots import BOTS
from graphs.debate.judge_prompt import read_judge_prompt
from graphs.debate.metrics import debate_metrics
from graphs.debate.options import DebateOptions
from graphs.debate.state import win_value
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks import MATH_TASKS
from graphs.tasks.base import Task

SEATS = (
    Seat("debater_a", SeatKind.LEARNER, "Answers the question first in each round and argues for its answer."),
    Seat("debater_b", SeatKind.CONTEXT, "Answers second in each round and argues against Debater A."),
    Seat(
        "judge",
        SeatKind.JUDGE,
        "Picks the winner: a model when the seat has a policy, else rules (the correct final answer wins).",
        RULES,
    ),
)


def initial_state(task: Task, options: DebateOptions) -> dict[str, Any]:
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
    return EpisodeOutcome(reward=win_value("debater_a", decision["winner"]), summary=summary)


GAME = GameSpec(
    name="debate",
    description="Two debaters answer a question and argue over rounds; a judge (rules or a model) picks the winner.",
    seats=SEATS,
    graph="graphs.debate.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=DebateOptions,
    tasks=MATH_TASKS,
    bots=BOTS,
    judge_prompt=read_judge_prompt,
    rewards={
        CORRECT: "each debater turn: its stated answer matches the ground truth (1/0)",
        "win": "each debater's last turn: 1 win, 0.5 tie, 0 loss",
    },
    metrics=debate_metrics,
    gate_metrics={"debater_a": GateMetric("debater_a_win_rate")},
)
