"""Seats: the named positions of a game, and what kind of agent each one is."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

RULES = "rules"
"""The policy of a judge seat that checks by rule (the ground truth, a rule proxy) and makes no
model call: the seat spec ``judge=rules`` and the label its episodes and judgments record."""
LEGACY_RULES = "verifier"
"""The old name of RULES: still accepted as a seat spec, and found in stores written before."""


def is_rules(label: str | None) -> bool:
    """Whether a seat spec or a stored policy label names the rule judge (under either name);
    ``verifier:NAME``, a trained verifier, does not."""
    return label in (RULES, LEGACY_RULES)


class SeatKind(StrEnum):
    LEARNER = "learner"
    """A trainable policy: one LoRA adapter per learner role."""
    JUDGE = "judge"
    """Scores or ranks the others: rules (no model call), an LLM judge or a reward model."""
    CONTEXT = "context"
    """A collaborator or competitor that is not trained in this game."""


@dataclass(frozen=True)
class Seat:
    name: str
    kind: SeatKind
    description: str
    default_policy: str = "model"
    """What fills the seat when the user names nothing: "model" (the configured base model)
    or RULES (a judge that checks by rule and makes no model call)."""
    takes_policy: bool = True
    """False for a judge that is only rules: its game never calls a policy for it,
    so a policy given to it would be recorded for the seat without ever judging."""
