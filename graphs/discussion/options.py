"""The options of the discussion game."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions

MIN_AGENTS, MAX_AGENTS = 2, 5
"""the agents that can play: seats agent_1 .. agent_5"""


@dataclass(frozen=True)
class DiscussionOptions(GameOptions):
    agents: int = 3
    """agents that discuss (seats agent_1 .. agent_N; 2-5)"""
    rounds: int = 2
    """rounds of answers: the first alone, each later one after reading the others' previous answers
    (1: no discussion)"""
    move_bonus: float = 0.0
    """credit an agent's answer earns for each other agent it moved from wrong to right in the next round"""

    def __post_init__(self) -> None:
        if not MIN_AGENTS <= self.agents <= MAX_AGENTS:
            raise ValueError(f"--agents must be between {MIN_AGENTS} and {MAX_AGENTS} for a discussion (its seats "
                             f"are agent_1 .. agent_{MAX_AGENTS}), got {self.agents}")
        if self.rounds < 1:
            raise ValueError(f"--rounds must be >= 1, got {self.rounds}")
        if not self.move_bonus >= 0:
            raise ValueError(f"--move-bonus must be >= 0, got {self.move_bonus}")
