"""The typed state of a debate episode."""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict

DEBATERS = ("debater_a", "debater_b")
LABELS = {"debater_a": "A", "debater_b": "B"}


class Argument(TypedDict):
    seat: str
    turn_id: str
    round: int
    text: str
    answer: str | None
    """the answer stated in this turn ("Answer: ..."), None when it states none"""


class Decision(TypedDict):
    winner: str | None
    """the winning seat, None for a tie"""
    judged_by: Literal["rules", "model"]
    """rules: the ground truth decided (``graphs.seats.RULES``); model: the judge seat's policy"""
    rationale: str
    judge_turn_id: str | None
    final_answers: dict[str, str | None]
    """each debater's last stated answer"""
    final_correct: dict[str, bool] | None
    """whether each final answer matches the ground truth (None without one)"""


class State(TypedDict):
    arguments: Annotated[list[Argument], operator.add]
    """every debater turn in order: A, B, A, B, ..."""
    decision: Decision | None


def win_value(seat: str, winner: str | None) -> float:
    """A debater's ``win`` reward: 1 win, 0.5 tie (no winner), 0 loss."""
    if winner is None:
        return 0.5
    return 1.0 if seat == winner else 0.0
