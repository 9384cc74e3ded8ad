"""Tasks from JSONL files in GSM8K form or MATH form.

GSM8K rows: ``question`` and ``answer``, the answer ending in ``#### N`` (N is the ground
truth, thousands separators removed). MATH rows: ``problem`` and either ``answer`` or a
``solution`` whose last ``\\boxed{...}`` is the ground truth; ``level`` and ``subject`` are
kept. Rows of either form may name their ``family`` and ``template`` (kept in the task's
meta). The form is read from the first row's keys; every later row must have the same form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from graphs.judges.boxed import last_boxed
from graphs.tasks.base import Task, TaskSourceError

RowFormat = Literal["gsm8k", "math"]


def load_jsonl(path: Path, *, split: str | None = None) -> list[Task]:
    """Every row of a GSM8K- or MATH-form JSONL file, in file order; ids are ``<file>:<line>``.

    A file does not say which split it is; ``split`` labels its tasks (what the user says the
    file is), so held-out evaluation episodes stay out of training datasets."""
    if not path.is_file():
        raise TaskSourceError(f"{path}: no such file (task files are JSONL in GSM8K or MATH form)")
    tasks = tasks_from_rows(_read_rows(path), source=path.name, split=split)
    if not tasks:
        raise TaskSourceError(f"{path}: the file has no rows")
    return tasks


def tasks_from_rows(rows: Iterable[tuple[str, dict[str, Any]]], *, source: str, split: str | None = None) -> list[Task]:
    """Tasks from (location, row) pairs; the location (``file:line``) is the task id and is
    named in every error."""
    tasks: list[Task] = []
    row_format: RowFormat | None = None
    for where, row in rows:
        if not isinstance(row, dict):
            raise TaskSourceError(f"{where}: expected a JSON object, got {type(row).__name__}")
        row_format = row_format or detect_format(row, where)
        convert = _gsm8k_task if row_format == "gsm8k" else _math_task
        tasks.append(convert(row, where, source, split))
    return tasks


def detect_format(row: dict[str, Any], where: str) -> RowFormat:
    if "question" in row:
        return "gsm8k"
    if "problem" in row:
        return "math"
    raise TaskSourceError(
        f"{where}: cannot tell the task format from the keys {sorted(row)}; GSM8K rows have "
        "'question' and 'answer', MATH rows have 'problem' and 'answer' or 'solution'"
    )


_BINARY_KINDS = {b"\x1f\x8b": "gzip-compressed", b"PK\x03\x04": "a zip archive", b"PAR1": "a Parquet file"}
"""Magic numbers of files people pass for JSONL, for the error's hint."""


def _read_rows(path: Path) -> Iterator[tuple[str, Any]]:
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{path.name}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TaskSourceError(f"{where}: {_not_text(raw, exc, number)}") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskSourceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from exc
            _refuse_surrogates(row, where, "the row")
            yield where, row


_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_surrogates(value: Any, where: str, what: str) -> None:
    """A lone surrogate (a ``\\udXXX`` JSON escape that is half of a UTF-16 pair) is no text:
    no model, database or terminal can take it, so the row is refused, naming the key."""
    if isinstance(value, str):
        found = _SURROGATE.search(value)
        if found is not None:
            raise TaskSourceError(
                f"{where}: {what} holds a lone surrogate ({found.group().encode('unicode_escape').decode()} at "
                f"character {found.start() + 1}), half of a UTF-16 pair, which is not text; write the character "
                "itself (UTF-8) or both halves of its pair (e.g. \\ud83d\\ude00)")
    elif isinstance(value, dict):
        for key, item in value.items():
            _refuse_surrogates(key, where, f"a key of {what}")
            _refuse_surrogates(item, where, f"{key!r}" if what == "the row" else f"{what}[{key!r}]")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_surrogates(item, where, f"{what}[{i}]")


def _not_text(raw: bytes, exc: UnicodeDecodeError, number: int) -> str:
    """Why a line is no UTF-8 text, with what the file seems to be instead."""
    column = len(raw[: exc.start].decode("utf-8", errors="replace")) + 1
    kind = next((name for magic, name in _BINARY_KINDS.items() if number == 1 and raw.startswith(magic)), None)
    what = f"the file is {kind}: decompress or convert it to JSONL first" if kind else (
        "a task file is UTF-8 text, one JSON object per line (a binary file, or text in another encoding: "
        "convert it with iconv -t utf-8)")
    return f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {column}); {what}"


def _text(row: dict[str, Any], key: str, where: str, row_format: str) -> str:
    if key not in row:
        raise TaskSourceError(f"{where}: missing key {key!r} in a {row_format} row (keys: {sorted(row)})")
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TaskSourceError(f"{where}: {key!r} must be text or a number, got {type(value).__name__}")
    return str(value)


def _grouping(row: dict[str, Any]) -> dict[str, str]:
    """A row's optional ``family`` (its figures are also reported by family) and ``template``
    (the wording it was written from: a template-held-out set may share none with training)."""
    return {key: str(row[key]) for key in ("family", "template") if row.get(key) not in (None, "")}


def _gsm8k_task(row: dict[str, Any], where: str, source: str, split: str | None) -> Task:
    question = _text(row, "question", where, "GSM8K")
    solution = _text(row, "answer", where, "GSM8K")
    reasoning, marker, final = solution.rpartition("####")
    if not marker or not final.strip():
        raise TaskSourceError(f"{where}: the GSM8K answer has no final '#### N' line: {solution[-80:]!r}")
    return Task(
        id=where,
        question=question,
        answer=final.strip().replace(",", ""),
        source=source,
        split=split,
        meta={"format": "gsm8k", "solution": reasoning.strip(), **_grouping(row)},
    )


def _math_task(row: dict[str, Any], where: str, source: str, split: str | None) -> Task:
    problem = _text(row, "problem", where, "MATH")
    if "answer" in row:
        answer = _text(row, "answer", where, "MATH")
    elif "solution" in row:
        boxed = last_boxed(_text(row, "solution", where, "MATH"))
        if boxed is None:
            raise TaskSourceError(f"{where}: the MATH solution has no \\boxed{{...}} answer; add an 'answer' key")
        answer = boxed
    else:
        raise TaskSourceError(f"{where}: a MATH row needs 'answer' or 'solution' (keys: {sorted(row)})")
    meta: dict[str, Any] = {"format": "math", **_grouping(row)}
    meta.update({key: row[key] for key in ("subject", "unique_id", "solution") if key in row})
    level = row.get("level")
    return Task(
        id=where,
        question=problem,
        answer=answer.strip(),
        source=source,
        split=split,
        difficulty=None if level is None else str(level),
        meta=meta,
    )
