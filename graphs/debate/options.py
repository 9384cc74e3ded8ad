"""The options of debate."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions


@dataclass(frozen=True)
class DebateOptions(GameOptions):
    rounds: int = 2
    """rounds in which both debaters speak"""

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
