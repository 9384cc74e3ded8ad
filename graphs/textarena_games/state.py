"""The typed state of a textarena episode."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict


class MoveRecord(TypedDict):
    seat: str
    player: int
    """the textarena player id that moved"""
    turn_id: str
    valid: bool
    """False when textarena reported the move invalid"""


class ToMove(TypedDict):
    player: int
    observation: str


class Result(TypedDict):
    players: dict[str, int]
    """seat -> the textarena player id it played (textarena's reasons name players by id)"""
    rewards: dict[str, float]
    """seat -> textarena's final reward"""
    winner: str | None
    """the seat whose reward is higher; None: a draw"""
    reason: str
    forfeited: list[str]
    """seats that lost by invalid moves"""


class State(TypedDict):
    session: Any
    """the episode's live ``EnvSession`` (graphs are never checkpointed, so it is never serialised)"""
    opening: list[str]
    """the random opening moves played before the seats took over (``opening.py``)"""
    to_move: ToMove | None
    moves: Annotated[list[MoveRecord], operator.add]
    done: bool
    result: Result | None
