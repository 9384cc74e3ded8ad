"""The options of story."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions


@dataclass(frozen=True)
class StoryOptions(GameOptions):
    rounds: int = 3
    """writer passages per story (the co-writer writes one between each two; the last must reach
    the ending)"""
    candidates: int = 2
    """writer passages sampled from one story state a turn: 2 lets the judge compare them (a DPO
    pair); a greedy writer samples 1"""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.candidates not in (1, 2):
            raise ValueError(f"candidates must be 1 or 2 (the judge compares two passages), got {self.candidates}")
