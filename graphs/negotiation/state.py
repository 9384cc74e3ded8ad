"""The typed state of a negotiation episode."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict


class MoveRecord(TypedDict):
    seat: str
    turn_id: str
    text: str
    line: str | None
    """the parsed move, canonical ("Propose books=1 hats=0 balls=2", "Accept"); None: no move"""
    take: list[int] | None
    """what the speaker takes, for a proposal"""
    accept: bool
    valid: bool
    """a move, within the pool, and an Accept only of a standing offer"""
    coherent: bool
    """valid and consistent with the speaker's earlier moves (``rules.check_move``)"""
    problem: str | None
    """why the move is not coherent"""


class Decision(TypedDict):
    proposer_take: list[int] | None
    """the agreed split as the proposer's take; None: no deal"""
    scores: dict[str, Any]
    """``pool.DealScores`` as a dict"""
    coherence: dict[str, float]
    """negotiator -> share of its moves that were coherent (rules)"""
    judge_coherence: float | None
    """the judge model's coherence score of the proposer (0..1), None without a judge model"""


class State(TypedDict):
    moves: Annotated[list[MoveRecord], operator.add]
    """every move in order: proposer, counterpart, proposer, ..."""
    decision: Decision | None
