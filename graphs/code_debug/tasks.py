"""code-debug tasks: the shipped ones and task files of the same shape.

A task is a JSON object on one line of a JSONL file::

    {"id": "sum-list/1", "description": "Return the sum of the numbers in a list.",
     "reference": "def sum_list(numbers): ...", "buggy": "def sum_list(numbers): ...",
     "tests": ["assert sum_list([]) == 0", "def test_one():\\n    assert sum_list([5]) == 5"]}

``tests`` are snippets (an assert line or a small test function named test_*), each passing
when it runs without raising. ``buggy`` may be left out for play with ``--bugs breaker``;
``id`` defaults to ``<file>:<line>``; other keys (``bug``: what the bug is) are kept in the
task's meta and never shown to the fixer.

The shipped tasks (``data/tasks.jsonl``, made by ``make_tasks`` from ``data/references.jsonl``)
have ids ``<reference>/<k>``: two bugs of one reference share it, and the split goes by the
reference (a hash puts one reference in three in ``heldout``), so no held-out function is seen
in training.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from graphs.tasks.base import Task, TaskSourceError
from graphs.tasks.files import _read_rows
from graphs.tasks.own import OwnTasks

SOURCE = "code-debug"
DATA = Path(__file__).resolve().parent / "data"
SHIPPED = DATA / "tasks.jsonl"
SPLITS = ("train", "heldout")
HELDOUT_ONE_IN = 3
EXAMPLE = ('{"description": "Return the sum of a list.", "reference": "def total(xs):\\n    return sum(xs)\\n", '
           '"buggy": "def total(xs):\\n    return sum(xs) + 1\\n", "tests": ["assert total([1, 2]) == 3"]}')
ACCEPTED = (f"'{SOURCE}' (the {SOURCE} tasks shipped with sparring: splits train and heldout) or a path to a .jsonl "
            f"file of code tasks, one per line: {EXAMPLE}")


def split_of(task_id: str) -> str:
    """The split of a shipped task: by its reference (the id before '/'), one in three held out."""
    reference = task_id.split("/")[0]
    return "heldout" if int(hashlib.sha256(reference.encode()).hexdigest(), 16) % HELDOUT_ONE_IN == 0 else "train"



def _shipped(split: str, n: int | None) -> list[Task]:
    tasks = [t for t in read_tasks(SHIPPED, split=None, source=SOURCE) if split_of(t.id) == split]
    return [Task(t.id, t.question, t.answer, t.source, split, t.difficulty, t.meta) for t in tasks]


OWN = OwnTasks(game="code-debug", builtin=SOURCE, splits=SPLITS, what="code-debug tasks", accepted=ACCEPTED,
               load_builtin=_shipped, read_file=lambda path, split: read_tasks(path, split=split))
load_code_tasks = OWN.load


def read_tasks(path: Path, *, split: str | None, source: str | None = None) -> list[Task]:
    """Every task of a code-task file, in file order; a row of the wrong shape or code that
    does not parse is a TaskSourceError naming the file, the line and the fix."""
    if not path.is_file():
        raise TaskSourceError(f"{path}: no such file (a code-task file is JSONL, one task per line: {EXAMPLE})")
    tasks: list[Task] = []
    first_line: dict[str, str] = {}
    for where, row in _read_rows(path):
        task = _task(row, where, source or path.name, split)
        if task.id in first_line:
            raise TaskSourceError(f"{where}: id {task.id!r} is used twice (first at {first_line[task.id]}); "
                                  "give every task its own id")
        first_line[task.id] = where
        tasks.append(task)
    if not tasks:
        raise TaskSourceError(f"{path}: the file has no tasks (one JSON object per line: {EXAMPLE})")
    return tasks


def _task(row: Any, where: str, source: str, split: str | None) -> Task:
    if not isinstance(row, dict):
        raise TaskSourceError(f"{where}: expected a JSON object like {EXAMPLE}, got {type(row).__name__}")
    description = _text(row, "description", where)
    reference = _code(row, "reference", where)
    buggy = _code(row, "buggy", where) if row.get("buggy") is not None else None
    tests = row.get("tests")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t.strip() for t in tests):
        raise TaskSourceError(f"{where}: 'tests' must be a non-empty list of strings, each an assert line or a small "
                              "test function, e.g. [\"assert total([1, 2]) == 3\"]")
    for i, test in enumerate(tests, start=1):
        _compiles(test, f"test {i}", where)
    task_id = row.get("id", where)
    if not isinstance(task_id, str) or not task_id:
        raise TaskSourceError(f"{where}: 'id' must be a non-empty string (or leave it out: the id is then {where!r})")
    meta = {key: value for key, value in row.items() if key not in ("id", "description", "reference")}
    meta.update(buggy=buggy, tests=list(tests))
    return Task(id=task_id, question=description, answer=reference, source=source, split=split, meta=meta)


def _text(row: dict[str, Any], key: str, where: str) -> str:
    if key not in row:
        raise TaskSourceError(f"{where}: missing key {key!r}; a code task has 'description', 'reference', 'tests' "
                              f"and 'buggy' (keys here: {sorted(row)})")
    value = row[key]
    if not isinstance(value, str) or not value.strip():
        raise TaskSourceError(f"{where}: {key!r} must be a non-empty string, got {json.dumps(value)[:60]}")
    return value


def _code(row: dict[str, Any], key: str, where: str) -> str:
    code = _text(row, key, where)
    _compiles(code, key, where)
    return code


def _compiles(code: str, what: str, where: str) -> None:
    try:
        compile(code, what, "exec")
    except (SyntaxError, ValueError) as exc:
        line = f" at line {exc.lineno} of it" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise TaskSourceError(f"{where}: {what!r} is not valid Python ({getattr(exc, 'msg', exc)}{line}); fix the "
                              "code (in JSON a newline inside a string is written \\n)") from None


CODE_TASKS = OWN.source()
