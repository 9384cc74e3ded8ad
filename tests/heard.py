"""A progress double for the API's calls: whatever protocol they report to (``PlayProgress``,
``EvaluationProgress``, ``RetrainProgress``, ``TrainProgress``...), it keeps every call."""

from __future__ import annotations

from typing import Any


class Heard:
    """A progress object that keeps every call as (method, *arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))

    def methods(self) -> list[str]:
        """The methods called, in order."""
        return [call[0] for call in self.calls]

    def named(self, name: str) -> list[tuple[Any, ...]]:
        """The arguments of each call of method ``name``, in order."""
        return [call[1:] for call in self.calls if call[0] == name]
