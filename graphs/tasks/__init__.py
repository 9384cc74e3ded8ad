"""Task sources: the built-in arithmetic generator and loaders for GSM8K/MATH files."""

from __future__ import annotations

import random
from pathlib import Path

from graphs.tasks import arithmetic
from graphs.tasks.base import Task, TaskSourceError
from graphs.tasks.files import load_jsonl
from graphs.tasks.hf import load_hf

__all__ = ["DEFAULT_ARITHMETIC_COUNT", "Task", "TaskSourceError", "load_tasks"]

DEFAULT_ARITHMETIC_COUNT = 100
"""How many arithmetic problems ``load_tasks`` makes when n is None (the generator is endless)."""

ACCEPTED_SPECS = (
    "'arithmetic' (levels 1-4), 'arithmetic:2' or 'arithmetic:1-3'; "
    "a path to a .jsonl file in GSM8K or MATH form; "
    "'hf:DATASET_ID[:config][@split]' (needs network access)"
)


def load_tasks(spec: str, *, n: int | None, seed: int, split: str = "train") -> list[Task]:
    """Up to ``n`` tasks from ``spec``, in an order fixed by ``seed``.

    Files and Hugging Face datasets: all rows shuffled with ``random.Random(seed)``, then the
    first n (all when n is None), so a smaller n gives a prefix of a larger one. ``split``
    picks the Hugging Face split when the spec names none and labels the tasks of a file.
    Arithmetic: the first problems of ``split`` at each level (n, default
    DEFAULT_ARITHMETIC_COUNT), shuffled by ``seed``; the same problems for every seed.
    """
    if n is not None and n < 1:
        raise TaskSourceError(f"n must be at least 1 (or None for all), got {n}")
    kind, _, rest = spec.partition(":")
    if kind == arithmetic.SOURCE:
        levels = arithmetic.parse_levels(rest) if rest else arithmetic.LEVELS
        tasks = arithmetic.generate(split, levels, DEFAULT_ARITHMETIC_COUNT if n is None else n)
    elif kind == "hf":
        tasks = load_hf(rest, split=split)
    elif spec.endswith(".jsonl") or Path(spec).is_file():
        tasks = load_jsonl(Path(spec), split=split)
    else:
        raise TaskSourceError(f"unknown task source {spec!r}; accepted: {ACCEPTED_SPECS}")
    random.Random(seed).shuffle(tasks)
    return tasks if n is None else tasks[:n]
