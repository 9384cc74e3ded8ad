"""What a long call that loads models and then works in phases tells as it goes
(``evaluate``, ``retrain``): the CLI draws a spinner, then a bar per phase, from it."""

from __future__ import annotations

from typing import Protocol


class PhaseProgress(Protocol):
    def loading(self) -> None:
        """The policies' models are being loaded."""

    def loaded(self) -> None:
        """They are loaded; the work starts."""

    def say(self, message: str) -> None:
        """A line about the work: stale work marked failed, a stored run reused, a role trained, gated or
        skipped."""

    def phase(self, name: str, done: int, total: int | None) -> None:
        """Progress of one phase ("round 1: play", "round 1: train actor", an evaluation run...)."""


class Silent:
    """A ``PhaseProgress`` that tells nobody: what a call reports to when given none."""

    def loading(self) -> None:
        pass

    def loaded(self) -> None:
        pass

    def say(self, message: str) -> None:
        pass

    def phase(self, name: str, done: int, total: int | None) -> None:
        pass
