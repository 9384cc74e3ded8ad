"""Text a store cannot hold, made storable: NUL characters become U+FFFD, and the record says so.

PostgreSQL refuses the NUL character (``\\u0000``) in text columns (SQLite keeps it). A task
file or a model reply may hold one; rather than losing the episode, the recorder retries a
refused batch with every NUL in every string of its records replaced by U+FFFD (the Unicode
replacement character), and marks each changed record with ``REPLACED_KEY`` (how many
characters were replaced) in its JSON field: a turn's ``sampling``, an episode's ``task``,
an episode end's ``outcome``, a reward's ``info``. A judgment has no such field: the U+FFFD in
its rationale is its mark.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from storage.records import EpisodeEnd, EpisodeStart, RewardRecord, TurnRecord

NUL, REPLACEMENT = "\x00", "\ufffd"
REPLACED_KEY = "stored_text_replaced"
"""the key, in a changed record's JSON field, of how many NUL characters were replaced"""
_MARKED_FIELD = {TurnRecord: "sampling", EpisodeStart: "task", EpisodeEnd: "outcome", RewardRecord: "info"}


def storable(record: Any) -> Any:
    """The record with every NUL replaced and the replacement counted in its mark; the record
    itself when it has none (records are dataclasses)."""
    changed: dict[str, Any] = {}
    replaced = 0
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        clean, count = _clean(value)
        if count:
            changed[field.name], replaced = clean, replaced + count
    if not replaced:
        return record
    marked = _MARKED_FIELD.get(type(record))
    if marked is not None:
        changed[marked] = {**(changed.get(marked, getattr(record, marked)) or {}), REPLACED_KEY: replaced}
    return dataclasses.replace(record, **changed)


def _clean(value: Any) -> tuple[Any, int]:
    """``value`` with NUL replaced in every string it holds, and how many were replaced."""
    if isinstance(value, str):
        count = value.count(NUL)
        return (value.replace(NUL, REPLACEMENT), count) if count else (value, 0)
    if isinstance(value, dict):
        total, out = 0, {}
        for key, item in value.items():
            clean_key, key_count = _clean(key)
            clean_item, item_count = _clean(item)
            out[clean_key] = clean_item
            total += key_count + item_count
        return (out, total) if total else (value, 0)
    if isinstance(value, list | tuple):
        cleaned = [_clean(item) for item in value]
        total = sum(count for _, count in cleaned)
        return (type(value)(item for item, _ in cleaned), total) if total else (value, 0)
    return value, 0
