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
    """the critic's review and a refinement also see the arithmetic checker's notes on the answer
    (each written step "a op b = c" whose result is wrong, with the right one:
    ``graphs.judges.arithmetic``), a calculator in the team; the rows that teach the critic's
    verdicts and the refinement turn assume it on"""
    stop_when_right: bool = False
    """stop once an answer is right (ground truth), unreviewed: with a stand-in critic that always
    says "incorrect" (practice), exactly the wrong answers are refined, as a truthful critic would"""

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError(f"turns must be >= 1, got {self.turns}")
