"""The options of negotiation."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions


@dataclass(frozen=True)
class NegotiationOptions(GameOptions):
    max_turns: int = 6
    """moves in all, the proposer's first, then alternating; no deal by then is worth 0 to both"""
    constrain_moves: bool = True
    """end each move with a 'Move:' line chosen by constrained decoding among the valid moves (off: the model
    writes it, and the invalid-move rate measures whether it can)"""

    def __post_init__(self) -> None:
        if self.max_turns < 2:
            raise ValueError(f"max_turns must be >= 2 (a proposal and an answer), got {self.max_turns}")
