"""Story tasks: the prompts shipped in ``graphs/story/data/`` and user files of the same shape.

A story task file is JSONL, one story prompt per line::

    {"id": "lighthouse", "premise": "A storm cuts the island off ...",
     "characters": ["Mara", "Old Tom"],
     "facts": ["The lighthouse is red",
               {"text": "Mara is afraid of water", "contradictions": ["Mara (?:swam|dived|dove)"]}],
     "forbidden": ["it was all a dream"],
     "ending": {"sentence": "The red light burned until morning."},
     "max_words": 60}

``id``, ``premise``, ``characters``, ``facts`` and ``ending`` are required; ``ending`` is either
``{"sentence": ...}`` or ``{"event": ..., "mentions": [...]}``; ``forbidden`` defaults to none and
``max_words`` (per passage) to 60. What the judge does with each is in ``graphs/story/rules.py``.

Specs: ``story`` (the shipped prompts: ``--split train``, the default, or ``heldout``, which the
deploy gate and `sparring eval` play) or a path to a ``.jsonl`` file of that shape (its tasks are
labelled with the split given, ``eval`` by default: evaluation data unless you say ``train``).
A row that is not of that shape is a TaskSourceError naming the file, the line and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

from graphs.story.constraints import parse_row
from graphs.tasks.base import Task, TaskSourceError
from graphs.tasks.own import OwnTasks

SOURCE = "story"
DATA = Path(__file__).parent / "data"
SHIPPED_SPLITS = ("train", "heldout")
FILE_SPLITS = ("eval", "train", "heldout")
ACCEPTED = ("'story' (the shipped prompts; --split train or heldout) or a path to a .jsonl file of story "
            "prompts (id, premise, characters, facts, ending; see `graphs/story/tasks.py`)")



OWN = OwnTasks(
    game="story", builtin=SOURCE, splits=SHIPPED_SPLITS, what="story prompts", accepted=ACCEPTED,
    load_builtin=lambda split, n: read_file(DATA / f"{split}.jsonl", source=SOURCE, split=split),
    read_file=lambda path, split: read_file(path, source=path.name, split=split),
)
load_story_tasks = OWN.load


def read_file(path: Path, *, source: str, split: str) -> list[Task]:
    """Every row of a story task file, in file order; ids are ``<source>:<row id>``."""
    if not path.is_file():
        raise TaskSourceError(f"{path}: no such file (story task files are JSONL: {ACCEPTED})")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise TaskSourceError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); a story task file is "
                              "UTF-8 JSONL, one object per line") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskSourceError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); each line is one "
                                  "JSON object") from None
        try:
            constraints = parse_row(row)
        except ValueError as exc:
            raise TaskSourceError(f"{where}: {exc}") from None
        if row["id"] in seen:
            raise TaskSourceError(f"{where}: id {row['id']!r} is also the id of line {seen[row['id']]}; ids must "
                                  "be unique in a file")
        seen[row["id"]] = number
        tasks.append(Task(id=f"{source}:{row['id']}", question=constraints.premise, answer=None, source=source,
                          split=split, meta={"constraints": constraints.to_dict()}))
    if not tasks:
        raise TaskSourceError(f"{path}: the file has no rows")
    return tasks


STORY_TASKS = OWN.source()
