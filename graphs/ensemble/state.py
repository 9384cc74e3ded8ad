"""The typed state of an ensemble episode."""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict

PICK_CORRECT = "pick_correct"
"""the judge's reward: its pick is a right answer (1/0)"""


class Answer(TypedDict):
    agent: int
    """0-based position of the agent in the ensemble"""
    variant: str
    turn_id: str
    text: str
    value: str | None
    """the final answer parsed from the response, None when unparseable"""
    correct: bool | None
    """whether it matches the ground truth (None without one)"""


class Team(TypedDict):
    answer: str | None
    """the team's answer: the majority vote, or the judge's pick (None when nobody gave one)"""
    decided_by: Literal["vote", "judge"]
    """the judge model decides only when the agents gave two or more distinct answers"""
    correct: bool | None
    judge_turn_id: str | None


class State(TypedDict):
    answers: Annotated[list[Answer], operator.add]
    """one per agent, in agent order"""
    team: Team | None
