"""The typed state of a discussion episode."""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict

AGENTS = tuple(f"agent_{i}" for i in range(1, 6))
"""every agent seat, in speaking order; a game of N agents uses the first N"""

MOVE_BONUS = "move_bonus"
"""an agent's reward for moving others to its right answer"""


class Answer(TypedDict):
    seat: str
    round: int
    turn_id: str
    text: str
    value: str | None
    """the final answer parsed from the response, None when unparseable"""
    correct: bool | None
    """whether it matches the ground truth (None without one)"""


class State(TypedDict):
    answers: Annotated[list[Answer], operator.add]
    """every agent's answer, round by round, agents in seat order within a round"""


def answers_of_round(answers: list[Answer], round_: int) -> list[Answer]:
    return [a for a in answers if a["round"] == round_]
