"""The retrieval game's questions: the shipped ones (train and heldout splits) or a user's file.

A question row: ``{"question", "answer", "gold_docs": [doc ids that state the facts]}``, and
optionally ``id``, ``aliases`` (other accepted answers) and ``facts`` (the gold sentences, for
people reading the file). Gold doc ids are checked against the episode's corpus (``--corpus``)
when the episode starts: the corpus is a game option, which a task source does not see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphs.tasks.base import Task, TaskSourceError
from graphs.tasks.files import _read_rows
from graphs.tasks.own import OwnTasks

SHIPPED = "retrieval"
SHIPPED_QUESTIONS = Path(__file__).parent / "data" / "questions.jsonl"
SHIPPED_SPLITS = ("train", "heldout")
QUESTION_FORMAT = ('one JSON object per line: {"question": "...", "answer": "...", "gold_docs": ["d001"]}, '
                   'optionally "id", "aliases" and "facts"')
ACCEPTED = (f"'{SHIPPED}' (the shipped questions about the shipped encyclopedia, splits train and heldout), "
            "or a questions .jsonl file about the corpus of --corpus")


OWN = OwnTasks(
    game="retrieval", builtin=SHIPPED, splits=SHIPPED_SPLITS, what="questions", accepted=ACCEPTED,
    load_builtin=lambda split, n: [t for t in read_questions(SHIPPED_QUESTIONS, source=SHIPPED) if t.split == split],
    read_file=lambda path, split: read_questions(path, split=split),
)
load_questions = OWN.load



def read_questions(path: Path, *, source: str | None = None, split: str | None = None) -> list[Task]:
    """Every question of a file, in order. The shipped file carries its own ids and splits
    (``source`` names it); a user's file gets ids ``<file>:<line>`` and the ``split`` label."""
    if not path.is_file():
        raise TaskSourceError(f"{path}: no such file; a question file is {QUESTION_FORMAT}")
    tasks = [_task(row, where, source, split) for where, row in _read_rows(path)]
    if not tasks:
        raise TaskSourceError(f"{path}: the file has no questions; a question file is {QUESTION_FORMAT}")
    return tasks


def _task(row: Any, where: str, source: str | None, split: str | None) -> Task:
    if not isinstance(row, dict):
        raise TaskSourceError(f"{where}: expected a JSON object, got {type(row).__name__}; a question file is "
                              f"{QUESTION_FORMAT}")
    missing = [key for key in ("question", "answer", "gold_docs") if key not in row]
    if missing:
        hint = " (a math task file? retrieval questions name the documents that answer them)" if (
            missing == ["gold_docs"]) else ""
        raise TaskSourceError(f"{where}: missing {', '.join(repr(k) for k in missing)}{hint}; a question file is "
                              f"{QUESTION_FORMAT}")
    question, answer, gold, aliases = row["question"], row["answer"], row["gold_docs"], row.get("aliases", [])
    if not isinstance(question, str) or not question.strip():
        raise TaskSourceError(f"{where}: 'question' must be non-empty text")
    if isinstance(answer, bool) or not isinstance(answer, str | int | float) or not str(answer).strip():
        raise TaskSourceError(f"{where}: 'answer' must be non-empty text or a number, got {answer!r}")
    if not isinstance(gold, list) or not gold or not all(isinstance(d, str | int) and str(d).strip() for d in gold):
        raise TaskSourceError(f"{where}: 'gold_docs' must be a non-empty list of document ids, e.g. [\"d001\"], "
                              f"got {gold!r}")
    if not isinstance(aliases, list) or not all(isinstance(a, str | int | float) for a in aliases):
        raise TaskSourceError(f"{where}: 'aliases' must be a list of other accepted answers, got {aliases!r}")
    gold_docs = list(dict.fromkeys(str(d).strip() for d in gold))
    return Task(
        id=f"{source}-{row['id']}" if source and "id" in row else where,
        question=" ".join(question.split()),
        answer=str(answer).strip(),
        source=source or where.rpartition(":")[0],
        split=row.get("split") if source else split,
        difficulty=f"{row.get('hops', len(gold_docs))}-hop",
        meta={"gold_docs": gold_docs, "aliases": [str(a) for a in aliases], "location": where,
              **{key: row[key] for key in ("facts", "kind") if key in row}},
    )


QUESTIONS = OWN.source()
