"""A task is one problem a game is played on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class TaskSourceError(ValueError):
    """A task source cannot be read: the message names the file and line, or the bad spec."""


@dataclass(frozen=True)
class Task:
    id: str
    """Stable id, unique within its source (e.g. "arith-train-2-00017", "gsm8k_test.jsonl:12")."""
    question: str
    answer: str | None
    """Ground-truth final answer (a number or LaTeX expression), None when there is none."""
    source: str
    split: str | None = None
    difficulty: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
