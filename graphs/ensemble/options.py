"""The options of the ensemble game."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.ensemble.variants import parse_variants
from graphs.options import GameOptions

MAX_AGENTS = 16


@dataclass(frozen=True)
class EnsembleOptions(GameOptions):
    agents: int = 4
    """agents that answer, each under the next variant of --variants, cycling (2-16)"""
    variants: str = ""
    """comma-separated instruction variants: plain, step-by-step, estimate-then-compute,
    check-your-work (empty: all four, in that order)"""

    def __post_init__(self) -> None:
        if not 2 <= self.agents <= MAX_AGENTS:
            raise ValueError(f"--agents must be between 2 and {MAX_AGENTS} for an ensemble, got {self.agents}")
        names = parse_variants(self.variants)
        if self.variants.strip() and self.agents < len(names):
            raise ValueError(
                f"--variants names {len(names)} variants but --agents is {self.agents}, so "
                f"{', '.join(names[self.agents:])} would never answer; raise --agents to {len(names)} or name fewer "
                "variants"
            )

    def agent_variants(self) -> tuple[str, ...]:
        """The variant of each agent, in agent order: the variants in turn, cycling."""
        names = parse_variants(self.variants)
        return tuple(names[i % len(names)] for i in range(self.agents))
