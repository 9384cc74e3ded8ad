"""Tasks from a Hugging Face dataset in GSM8K or MATH form: ``hf:DATASET_ID[:config][@split]``.

Needs network access (or the dataset already in the local Hugging Face cache).
"""

from __future__ import annotations

from graphs.tasks.base import Task, TaskSourceError
from graphs.tasks.files import tasks_from_rows

_SPLIT_NAMES = {"train": "train", "heldout": "test"}
"""sparring's split names -> the usual Hugging Face split names, when the spec names none."""


def load_hf(spec: str, *, split: str) -> list[Task]:
    """``spec`` is what follows ``hf:``, e.g. ``openai/gsm8k:main@test``. Without ``@split``,
    sparring's ``train`` reads the dataset's ``train`` split and ``heldout`` its ``test`` split."""
    body, _, hf_split = spec.partition("@")
    dataset_id, _, config = body.partition(":")
    if not dataset_id:
        raise TaskSourceError(f"hf:{spec}: name a dataset, e.g. 'hf:openai/gsm8k:main@test'")
    hf_split = hf_split or _SPLIT_NAMES.get(split, split)
    try:
        from datasets import load_dataset

        rows = load_dataset(dataset_id, config or None, split=hf_split)
    except Exception as exc:  # the datasets library raises many kinds; all mean "cannot load"
        raise TaskSourceError(
            f"cannot load Hugging Face dataset hf:{spec} (split {hf_split!r}): {type(exc).__name__}: {exc}. "
            "Loading needs network access or a local cache; if you are offline, download the data "
            "elsewhere and pass a .jsonl file instead"
        ) from exc
    source = f"hf:{dataset_id}" + (f":{config}" if config else "")
    rows_with_ids = ((f"{source}@{hf_split}:{i}", row) for i, row in enumerate(rows))
    return tasks_from_rows(rows_with_ids, source=source, split=hf_split)
