"""Per-seat credit rules: the scalar reward of each turn of a role, as a game defines it.

A rule reads the logged turns of one episode (``CreditTurn``: what the dataset builders read
from the store) and returns turn id -> credit for the selected turns of the role that have
one. Turns without credit make no row in builders that need a reward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

CORRECT = "correct"
"""The ground-truth reward: a game that checks a turn against the task's answer logs it under
this name (1.0 correct, 0.0 incorrect or unparsed); reward-model rows and truth-checked
preference pairs read it."""


class CreditTurn(Protocol):
    """One logged turn as a credit rule sees it (``training.datasets.reading.LoggedTurn``)."""

    @property
    def turn_id(self) -> str: ...
    @property
    def idx(self) -> int: ...
    @property
    def seat(self) -> str: ...
    @property
    def selected(self) -> bool:
        """whether the turn is one of the role's turns the build reads (policy, age)"""
    @property
    def rewards(self) -> Mapping[str, float]:
        """reward name -> value (of several events with one name, the latest)"""


def reward_sum(turns: Sequence[CreditTurn], role: str) -> dict[str, float]:
    """The default rule: the sum of the reward events on each turn (none: no credit)."""
    return {t.turn_id: sum(t.rewards.values()) for t in turns if t.selected and t.seat == role and t.rewards}


@dataclass(frozen=True)
class CreditRule:
    credits: Callable[[Sequence[CreditTurn], str], dict[str, float]] = reward_sum
    """(the episode's turns in order, role) -> turn id -> credit"""
    reads: tuple[str, ...] = ()
    """other seats whose turns (rewards only) the rule reads; builders load them too"""


DEFAULT_CREDIT = CreditRule()
