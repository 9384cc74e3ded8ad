"""Training rows: accept a ``datasets.Dataset`` or a list of dicts; check them before any
model is loaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from datasets import Dataset

from training.trainers.errors import DatasetColumnsError, EmptyTrainingDataError

TrainingRows = Dataset | Sequence[Mapping[str, Any]]
"""A dataset snapshot (``training.datasets.load_snapshot``) or rows in the same format."""


def as_dataset(rows: TrainingRows, kind: str) -> Dataset:
    """``rows`` as a ``Dataset``; an empty one raises ``EmptyTrainingDataError``."""
    kind = str(kind)
    dataset = rows if isinstance(rows, Dataset) else Dataset.from_list([dict(row) for row in rows])
    if len(dataset) == 0:
        raise EmptyTrainingDataError(
            f"The {kind} dataset has no rows, so there is nothing to train on. Build a {kind} snapshot from "
            f"episodes that have what the builder keeps (play more episodes, move the watermark back with an "
            f"earlier `since`, or loosen the builder's threshold)."
        )
    return dataset


def require_columns(dataset: Dataset, kind: str, *alternatives: tuple[str, ...]) -> None:
    """Raise unless the dataset has all the columns of at least one of ``alternatives``."""
    kind, present = str(kind), set(dataset.column_names)
    if any(set(columns) <= present for columns in alternatives):
        return
    wanted = " or ".join("{" + ", ".join(columns) + "}" for columns in alternatives)
    raise DatasetColumnsError(
        f"The {kind} trainer needs the columns {wanted}; the dataset has {sorted(present)}. Build the "
        f"dataset with the {kind} builder (training.datasets.build_snapshot with kind {kind!r})."
    )


TEXT_COLUMNS = ("prompt", "messages")
ANSWER_COLUMNS = ("completion", "chosen", "rejected")
TEMPLATE_TOKENS = 8
"""Tokens the chat template adds per message (role markers): an upper estimate."""


def longest_row_tokens(dataset: Dataset, tokenizer: Any) -> int:
    """Tokens of the longest sequence a row makes (its prompt and longest answer), estimated
    from the text before TRL tokenises it: what the batch split (``TRLTrainingConfig.split_for``)
    needs before the trainer is built."""
    longest = 0
    for row in dataset.select_columns([c for c in (*TEXT_COLUMNS, *ANSWER_COLUMNS) if c in dataset.column_names]):
        prompt = sum(_tokens(row[c], tokenizer) for c in TEXT_COLUMNS if c in row)
        answer = max((_tokens(row[c], tokenizer) for c in ANSWER_COLUMNS if c in row), default=0)
        longest = max(longest, prompt + answer)
    return longest


def _tokens(value: Any, tokenizer: Any) -> int:
    """Tokens of a text column: a string, or a list of chat messages."""
    if isinstance(value, str):
        return len(tokenizer(value, add_special_tokens=False)["input_ids"])
    if isinstance(value, list):
        return sum(TEMPLATE_TOKENS + _tokens(m.get("content") or "", tokenizer) for m in value if isinstance(m, dict))
    return 0
