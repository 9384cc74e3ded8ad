"""A task is one problem a game is played on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class TaskSourceError(ValueError):
    """A task source cannot be read: the message names the file and line, or the bad spec."""


class TaskLoader(Protocol):
    def __call__(self, spec: str, *, n: int | None, seed: int, split: str | None = None) -> list[Task]: ...


@dataclass(frozen=True)
class TaskSource:
    """Where a game's tasks come from (``GameSpec.tasks``): the spec `--tasks` defaults to,
    the specs it accepts (said in help and errors), and the loader.

    ``load(spec, n=, seed=, split=)`` returns up to n tasks in an order fixed by seed, labelled
    with ``split`` (default: ``default_split(spec)``); a spec or file it cannot read raises
    TaskSourceError naming the file, line and fix. The deploy gate and `sparring eval` ask for
    ``split="heldout"``, training for ``"train"``: a source whose tasks have no such split
    (a file) labels them so."""

    default: str
    accepted: str
    load: TaskLoader
    default_split: Callable[[str], str]
    evaluation_splits: Callable[[str], tuple[str, ...]] = lambda spec: ("heldout",)
    """The splits an evaluation of ``spec`` plays, the deciding one first: the gate compares its
    metric on the first and refuses a family that got worse beyond noise in any of them."""


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
