"""Task sources: the built-in arithmetic generator and loaders for GSM8K/MATH files."""

from __future__ import annotations

import random
from pathlib import Path

from graphs.tasks import arithmetic
from graphs.tasks.base import Task, TaskSource, TaskSourceError
from graphs.tasks.files import load_jsonl
from graphs.tasks.hf import load_hf

__all__ = ["DEFAULT_ARITHMETIC_COUNT", "FILE_SPLITS", "MATH_TASKS", "SPLIT_TITLES", "Task", "TaskSourceError",
           "default_split", "evaluation_splits", "load_tasks"]

DEFAULT_ARITHMETIC_COUNT = 100
"""How many arithmetic problems ``load_tasks`` makes when n is None (the generator is endless)."""

FILE_SPLITS = ("eval", "train", "heldout")
"""Labels a task file's tasks may take. Dataset builders read ``train`` only: ``eval`` (a task
file's default) and ``heldout`` (the generator's held-out problems, the deploy gate's) are
evaluation data."""

ACCEPTED_SPECS = (
    "'arithmetic' (levels 1-4), 'arithmetic:2' or 'arithmetic:1-3' (splits train, heldout, dev, unseen); "
    "a path to a .jsonl file in GSM8K or MATH form; "
    "'hf:DATASET_ID[:config][@split]' (needs network access)"
)


SPLIT_TITLES = {
    "unseen": "unseen wordings (template-held-out)",
    "heldout": "held-out problems",
    "dev": "dev wordings",
}
"""How tables name the evaluation splits."""


def evaluation_splits(spec: str) -> tuple[str, ...]:
    """The splits evaluations of ``spec`` play, the deciding one first: for the arithmetic
    generator the template-held-out ``unseen`` split, then ``heldout`` (new numbers in the
    training wordings); for every other source its ``heldout`` split."""
    return ("unseen", "heldout") if spec.partition(":")[0] == arithmetic.SOURCE else ("heldout",)


def default_split(spec: str) -> str:
    """The split of ``spec``'s tasks when the user names none: ``train`` for the arithmetic
    generator and Hugging Face datasets (their train split), ``eval`` for a task file, since
    a file (GSM8K's test set, say) is evaluation data unless the user says otherwise."""
    kind = spec.partition(":")[0]
    return "train" if kind in (arithmetic.SOURCE, "hf") else "eval"


def load_tasks(spec: str, *, n: int | None, seed: int, split: str | None = None) -> list[Task]:
    """Up to ``n`` tasks from ``spec``, in an order fixed by ``seed``.

    Files and Hugging Face datasets: all rows shuffled with ``random.Random(seed)``, then the
    first n (all when n is None), so a smaller n gives a prefix of a larger one. ``split``
    (default: ``default_split(spec)``) picks the Hugging Face split when the spec names none
    and labels the tasks of a file (one of FILE_SPLITS). Arithmetic: the first problems of
    ``split`` at each level (n, default DEFAULT_ARITHMETIC_COUNT), shuffled by ``seed``; the
    same problems for every seed.
    """
    if n is not None and n < 1:
        raise TaskSourceError(f"n must be at least 1 (or None for all), got {n}")
    split = split or default_split(spec)
    kind, _, rest = spec.partition(":")
    if kind == arithmetic.SOURCE:
        levels = arithmetic.parse_levels(rest) if rest else arithmetic.LEVELS
        tasks = arithmetic.generate(split, levels, DEFAULT_ARITHMETIC_COUNT if n is None else n)
    elif kind == "hf":
        tasks = load_hf(rest, split=split)
    elif spec.endswith(".jsonl") or Path(spec).is_file():
        if split not in FILE_SPLITS:
            raise TaskSourceError(f"split {split!r} for a task file: use one of {', '.join(FILE_SPLITS)}")
        tasks = load_jsonl(Path(spec), split=split)
    else:
        raise TaskSourceError(f"unknown task source {spec!r}; accepted: {ACCEPTED_SPECS}")
    random.Random(seed).shuffle(tasks)
    return tasks if n is None else tasks[:n]


MATH_TASKS = TaskSource(default=arithmetic.SOURCE, accepted=ACCEPTED_SPECS, load=load_tasks,
                        default_split=default_split, evaluation_splits=evaluation_splits)
"""The task source of the math games: the arithmetic generator, GSM8K/MATH files, Hugging Face."""
