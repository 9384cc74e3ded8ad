"""textarena tasks: an environment seed and the textarena player the learner seat takes.

The env is a game option (``--env``), so one task serves every env. Generated tasks (spec
``textarena``): seeds 0, 1, 2... for ``train`` and 1000000, 1000001... for ``heldout``, the
learner as Player 0 and Player 1 in turn. A task file is JSONL, one task per line:
``{"seed": 7, "player": 1}`` with an optional ``"id"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphs.tasks.base import Task, TaskSourceError
from graphs.tasks.own import OwnTasks

SOURCE = "textarena"
SPLITS = ("train", "heldout")
FIRST_SEED = {"train": 0, "heldout": 1_000_000}
DEFAULT_COUNT = 100
"""tasks of a split when n is None"""
PLAYERS = (0, 1)
EXAMPLE = '{"seed": 7, "player": 1}'
ACCEPTED = (f"'{SOURCE}' (generated: env seeds, the learner as Player 0 and 1 in turn; train and heldout seeds "
            f"differ) or a path to a .jsonl file, one task per line: {EXAMPLE}")


def make_task(task_id: str, seed: int, player: int, source: str, split: str) -> Task:
    return Task(task_id, f"Env seed {seed}, the learner as Player {player}.", None, source, split,
                meta={"seed": seed, "player": player})


def _generated(split: str, n: int | None) -> list[Task]:
    first = FIRST_SEED[split]
    return [make_task(f"ta-{split}-{k:05d}", first + k, PLAYERS[k % 2], SOURCE, split)
            for k in range(DEFAULT_COUNT if n is None else n)]


def task_from_row(row: Any, where: str, source: str, split: str) -> Task:
    if not isinstance(row, dict) or "seed" not in row or "player" not in row:
        found = ", ".join(sorted(map(str, row))) if isinstance(row, dict) else type(row).__name__
        raise TaskSourceError(f"{where}: not a textarena task (found: {found or 'nothing'}); a task row looks like "
                              f"{EXAMPLE}")
    seed, player = row["seed"], row["player"]
    if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise TaskSourceError(f"{where}: 'seed' must be a non-negative integer, got {seed!r}")
    if player not in PLAYERS or isinstance(player, bool):
        raise TaskSourceError(f"{where}: 'player' must be 0 or 1 (the textarena player the learner takes), "
                              f"got {player!r}")
    return make_task(str(row.get("id", where)), seed, player, source, split)


def load_task_file(path: Path, split: str) -> list[Task]:
    if not path.is_file():
        raise TaskSourceError(f"{path}: no such file (a textarena task file is JSONL, e.g. {EXAMPLE})")
    tasks = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskSourceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); one task per line, "
                                  f"e.g. {EXAMPLE}") from exc
        tasks.append(task_from_row(row, where, path.name, split))
    if not tasks:
        raise TaskSourceError(f"{path}: the file has no tasks; one per line, e.g. {EXAMPLE}")
    return tasks


TEXTARENA_TASKS = OwnTasks(game="textarena", builtin=SOURCE, splits=SPLITS, accepted=ACCEPTED,
                           load_builtin=_generated, read_file=load_task_file).source()
