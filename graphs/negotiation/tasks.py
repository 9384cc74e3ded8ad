"""Negotiation tasks: generated pools (Deal-or-No-Deal style) and pool files.

Generated: 3 item types (books, hats, balls), each counted 1-4, and for each side integer
values that make the whole pool worth 10 to it, drawn uniformly among such value vectors.
Kept only when every item type is worth something to someone, some type is worth something
to both (there is something to bargain over), the two sides' values differ, and some split
gives both sides value. Every pool is a pure function of its candidate number; a pool belongs
to ``heldout`` when a hash of its text falls in the held-out fifth, else to ``train`` (as the
arithmetic generator splits its problems), and repeats are skipped.

A pool file is JSONL, one pool per line:
``{"counts": [2, 1, 3], "proposer_values": [3, 4, 0], "counterpart_values": [1, 2, 2]}``
with an optional ``"items": ["books", "hats", "balls"]`` (1-6 lowercase names; default those
three) and ``"id"``. Any positive total value is allowed (shares are of each side's total).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from graphs.negotiation.pool import ITEMS, Pool
from graphs.tasks.base import Task, TaskSourceError
from graphs.tasks.own import OwnTasks

SOURCE = "negotiation"
SPLITS = ("train", "heldout")
HELDOUT_PERCENT = 20
DEFAULT_COUNT = 100
"""pools the generator makes when n is None (it is endless)"""
TOTAL = 10
MAX_COUNT = 9
MAX_SPLITS = 1000
"""the most splits a pool may have: each is an option of the constrained move line"""
EXAMPLE = '{"counts": [2, 1, 3], "proposer_values": [3, 4, 0], "counterpart_values": [1, 2, 2]}'
ACCEPTED = (f"'{SOURCE}' (generated pools: 3 item types counted 1-4, values worth {TOTAL} to each side) or a path "
            f"to a .jsonl pool file, one pool per line: {EXAMPLE}")


def question(pool: Pool) -> str:
    return (f"Split the pool {pool.describe(pool.counts)}; proposer values {pool.describe(pool.proposer_values)}, "
            f"counterpart values {pool.describe(pool.counterpart_values)}.")


# --- the generator ------------------------------------------------------------------------


@functools.cache
def _value_vectors(counts: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Every vector of non-negative integer values that makes the pool worth TOTAL."""
    ranges = [range(TOTAL // c + 1) for c in counts]
    return tuple(v for v in itertools.product(*ranges) if sum(n * x for n, x in zip(counts, v, strict=True)) == TOTAL)


def _candidate(number: int) -> Pool | None:
    rng = random.Random(f"{SOURCE}:{number}")
    counts = tuple(rng.randint(1, 4) for _ in ITEMS)
    vectors = _value_vectors(counts)
    if not vectors:  # e.g. 3 of each: no integer values add up to 10
        return None
    proposer, counterpart = rng.choice(vectors), rng.choice(vectors)
    every_item_valued = all(p + c > 0 for p, c in zip(proposer, counterpart, strict=True))
    conflict = any(p > 0 and c > 0 for p, c in zip(proposer, counterpart, strict=True))
    pool = Pool(ITEMS, counts, proposer, counterpart)
    return pool if every_item_valued and conflict and proposer != counterpart and pool.best_nash > 0 else None


def split_of(text: str) -> str:
    bucket = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"


def pools(split: str) -> Iterator[Task]:
    """The endless, deterministic sequence of distinct pools of one split."""
    if split not in SPLITS:
        raise TaskSourceError(f"unknown negotiation split {split!r} for generated pools; use one of: "
                              f"{', '.join(SPLITS)}")
    seen: set[str] = set()
    index = 0
    for number in itertools.count():
        pool = _candidate(number)
        if pool is None:
            continue
        text = question(pool)
        if text in seen or split_of(text) != split:
            continue
        seen.add(text)
        yield Task(f"nego-{split}-{index:06d}", text, None, SOURCE, split, meta=pool.to_meta())
        index += 1


# --- pool files ---------------------------------------------------------------------------


def _ints(row: dict[str, Any], key: str, where: str, size: int | None) -> tuple[int, ...]:
    value = row.get(key)
    if not (isinstance(value, list) and value and all(isinstance(x, int) and not isinstance(x, bool) for x in value)):
        raise TaskSourceError(f"{where}: {key!r} must be a non-empty list of integers, got {value!r}; e.g. {EXAMPLE}")
    if size is not None and len(value) != size:
        raise TaskSourceError(f"{where}: {key!r} has {len(value)} numbers but the pool has {size} item types; "
                              "give one per item type")
    return tuple(value)


def pool_from_row(row: Any, where: str) -> Pool:
    """A pool from one row of a pool file; a row of the wrong shape names the fix."""
    if not isinstance(row, dict):
        raise TaskSourceError(f"{where}: expected a JSON object, got {type(row).__name__}; e.g. {EXAMPLE}")
    missing = [k for k in ("counts", "proposer_values", "counterpart_values") if k not in row]
    if missing:
        raise TaskSourceError(f"{where}: not a negotiation pool: missing {', '.join(map(repr, missing))} (keys found: "
                              f"{', '.join(sorted(map(str, row))) or 'none'}); a pool row looks like {EXAMPLE}")
    counts = _ints(row, "counts", where, None)
    items = row.get("items", list(ITEMS[: len(counts)]) if len(counts) <= len(ITEMS) else None)
    if not (isinstance(items, list) and 1 <= len(items) <= 6 and all(isinstance(i, str) and i.isalpha()
                                                                     and i.islower() for i in items)
            and len(set(items)) == len(items)):
        raise TaskSourceError(f"{where}: 'items' must list 1-6 distinct lowercase names, one per count (needed for "
                              f"more than {len(ITEMS)} counts), got {items!r}")
    if len(items) != len(counts):
        raise TaskSourceError(f"{where}: 'items' names {len(items)} types but 'counts' has {len(counts)} numbers")
    if any(not 1 <= c <= MAX_COUNT for c in counts):
        raise TaskSourceError(f"{where}: each count must be 1-{MAX_COUNT}, got {list(counts)}")
    pool = Pool(tuple(items), counts, _ints(row, "proposer_values", where, len(counts)),
                _ints(row, "counterpart_values", where, len(counts)))
    if len(pool.splits) > MAX_SPLITS:
        raise TaskSourceError(f"{where}: the pool has {len(pool.splits)} splits, more than {MAX_SPLITS}; "
                              "use fewer item types or smaller counts")
    for seat in ("proposer", "counterpart"):
        if any(v < 0 for v in pool.values(seat)) or pool.total(seat) <= 0:
            raise TaskSourceError(f"{where}: {seat}_values must be non-negative and make the pool worth something "
                                  f"to the {seat}, got {list(pool.values(seat))}")
    if pool.best_nash == 0:
        raise TaskSourceError(f"{where}: no split gives both sides value (both value only what cannot be shared), "
                              "so fairness is undefined; change the values")
    return pool


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{path.name}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise TaskSourceError(f"{where}: not UTF-8 text; a pool file is JSONL, e.g. {EXAMPLE}") from None
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskSourceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); one pool per line, "
                                      f"e.g. {EXAMPLE}") from exc


def load_pool_file(path: Path, *, split: str) -> list[Task]:
    if not path.is_file():
        raise TaskSourceError(f"{path}: no such file (a negotiation pool file is JSONL, e.g. {EXAMPLE})")
    tasks = []
    for where, row in _rows(path):
        pool = pool_from_row(row, where)
        task_id = row.get("id")
        tasks.append(Task(str(task_id) if task_id is not None else where, question(pool), None, path.name, split,
                          meta=pool.to_meta()))
    if not tasks:
        raise TaskSourceError(f"{path}: the file has no pools; one per line, e.g. {EXAMPLE}")
    return tasks


# --- the task source ----------------------------------------------------------------------



def _generated(split: str, n: int | None) -> list[Task]:
    """The first n generated pools of ``split`` (default DEFAULT_COUNT), the same for every seed."""
    generated = pools(split)
    return [next(generated) for _ in range(DEFAULT_COUNT if n is None else n)]


OWN = OwnTasks(game="negotiation", builtin=SOURCE, splits=SPLITS, what="pools", accepted=ACCEPTED,
               load_builtin=_generated, read_file=lambda path, split: load_pool_file(path, split=split))
load_negotiation_tasks = OWN.load


NEGOTIATION_TASKS = OWN.source()
