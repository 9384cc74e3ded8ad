"""Seats: the named positions of a game, and what kind of agent each one is."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class SeatKind(StrEnum):
    LEARNER = "learner"
    """A trainable policy: one LoRA adapter per learner role."""
    JUDGE = "judge"
    """Scores or ranks the others: a rule-based verifier, an LLM judge or a reward model."""
    CONTEXT = "context"
    """A collaborator or competitor that is not trained in this game."""


@dataclass(frozen=True)
class Seat:
    name: str
    kind: SeatKind
    description: str
    default_policy: str = "model"
    """What fills the seat when the user names nothing: "model" (the configured base model)
    or "verifier" (a judge that checks the ground truth and makes no model call)."""
    takes_policy: bool = True
    """False for a judge that is only a rule verifier: its game never calls a policy for it,
    so a policy given to it would be recorded for the seat without ever judging."""
