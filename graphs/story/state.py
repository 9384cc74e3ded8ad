"""The typed state of a story episode."""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict

WRITER, CO_WRITER = "writer", "co_writer"


class Passage(TypedDict):
    seat: str
    turn_id: str
    round: int
    text: str
    score: float
    """the share of its consistency checks the passage passed"""
    violations: list[str]
    ending: bool | None
    """whether it reaches the required ending (the writer's last passage; None for the others)"""
    new_words: int
    """the creativity proxy: distinct words it adds to what its author was shown"""


class Choice(TypedDict):
    """How the kept writer passage of one turn was chosen among its candidates."""

    round: int
    by: Literal["single", "identical", "consistency", "creativity", "creativity-proxy", "tie"]
    """single: one candidate; identical: both the same; consistency: one broke fewer rules;
    creativity: the judge model's preference; creativity-proxy: more new words; tie: equal proxy"""


class Verdict(TypedDict):
    writer_score: float
    """mean consistency score of the writer's kept passages"""
    writer_violations: int
    ending_reached: bool
    creativity_winner: str | None
    """the judge model's pick between the writer's and the co-writer's passages (None: tie or not asked)"""
    proxy_winner: str | None


class State(TypedDict):
    passages: Annotated[list[Passage], operator.add]
    """the story: the kept passages in order (writer, co-writer, writer, ...)"""
    choices: Annotated[list[Choice], operator.add]
    verdict: Verdict | None
