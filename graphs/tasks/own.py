"""The task source most games share: the game's own shipped or generated tasks, or a task
file of the game's shape."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from graphs.tasks import FILE_SPLITS
from graphs.tasks.base import Task, TaskSource, TaskSourceError


@dataclass(frozen=True)
class OwnTasks:
    """``builtin`` names the game's own tasks, which come in ``splits``
    (``load_builtin(split, n)``); any other spec is a ``.jsonl`` file of the game's shape
    (``read_file(path, split)``), labelled one of FILE_SPLITS (``eval`` unless told). Either
    way the tasks are shuffled by seed and the first n kept, so a smaller n gives a prefix."""

    game: str
    builtin: str
    splits: tuple[str, ...]
    load_builtin: Callable[[str, int | None], list[Task]]
    read_file: Callable[[Path, str], list[Task]]
    accepted: str
    what: str = "tasks"
    """what the game calls its tasks in errors ("story prompts", "questions", "code-debug tasks")"""

    def default_split(self, spec: str) -> str:
        return "train" if spec == self.builtin else "eval"

    def load(self, spec: str, *, n: int | None, seed: int, split: str | None = None) -> list[Task]:
        if n is not None and n < 1:
            raise TaskSourceError(f"n must be at least 1 (or None for all), got {n}")
        split = split or self.default_split(spec)
        if spec == self.builtin:
            if split not in self.splits:
                raise TaskSourceError(f"split {split!r}: the shipped {self.what} have the splits "
                                      f"{', '.join(self.splits)}")
            tasks = self.load_builtin(split, n)
        elif spec.endswith(".jsonl") or Path(spec).is_file():
            if split not in FILE_SPLITS:
                raise TaskSourceError(f"split {split!r} for a file of {self.what}: use one of {', '.join(FILE_SPLITS)}")
            tasks = self.read_file(Path(spec), split)
        else:
            raise TaskSourceError(f"unknown task source {spec!r} for {self.game}; accepted: {self.accepted}")
        random.Random(seed).shuffle(tasks)
        return tasks if n is None else tasks[:n]

    def source(self) -> TaskSource:
        return TaskSource(default=self.builtin, accepted=self.accepted, load=self.load,
                          default_split=self.default_split)
