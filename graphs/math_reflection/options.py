"""The options of math-reflection."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions


@dataclass(frozen=True)
class ReflectionOptions(GameOptions):
    turns: int = 3
    """most actor answers (1 + refinements)"""
    stop_on_correct: bool = True
    """stop when the critic says the answer is correct"""
    checker: bool = True
    """a refinement also sees the arithmetic checker's notes on the rejected answer (each written
    step "a op b = c" whose result is wrong, with the right one: ``graphs.judges.arithmetic``), a
    calculator beside the critic; the rows that teach the refinement turn assume it on"""
    stop_when_right: bool = False
    """stop once an answer is right (ground truth), unreviewed: with a stand-in critic that always
    says "incorrect" (practice), exactly the wrong answers are refined, as a truthful critic would"""

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, got {self.turns}")
