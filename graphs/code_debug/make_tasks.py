"""Make the shipped code-debug tasks from the reference functions.

    python -m graphs.code_debug.make_tasks [REFERENCES.jsonl] [TASKS.jsonl]

Each reference (``data/references.jsonl``: id, description, reference, tests) is written in
``ast.unparse`` form and must pass all its tests in the sandbox. Its single-site mutations
(``mutate``) are then tried in an order seeded by its id until two fail some test with the
status ``failed`` (they compile, run within the limits and give a wrong result; a mutation
that loops or crashes is skipped). Each becomes a task ``<id>/<k>`` whose ``bug`` says what
was changed. Deterministic: the same references give the same file.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from graphs.code_debug.mutate import Mutation, mutations, normalise
from graphs.code_debug.tasks import DATA, SHIPPED, read_tasks
from graphs.sandbox import Limits, Sandbox, Status

BUGS_PER_REFERENCE = 2
REFERENCES = DATA / "references.jsonl"


def bugs(reference: str, tests: list[str], seed: str, sandbox: Sandbox, wanted: int = BUGS_PER_REFERENCE
         ) -> list[Mutation]:
    """Up to ``wanted`` mutations of the reference that fail some test, in the order ``seed``
    gives, each of a kind the others are not while there are such (bugs of one function differ)."""
    candidates = mutations(reference)
    random.Random(seed).shuffle(candidates)
    found: list[Mutation] = []
    tried: set[str] = set()
    for new_kinds_only in (True, False):
        for candidate in candidates:
            if len(found) == wanted:
                return found
            if candidate.code in tried or (new_kinds_only and candidate.kind in {f.kind for f in found}):
                continue
            tried.add(candidate.code)
            if sandbox.run(candidate.code, tests, reference).status == Status.FAILED:
                found.append(candidate)
    return found


def tasks_of(row: dict[str, Any], sandbox: Sandbox) -> tuple[list[dict[str, Any]], str | None]:
    """The tasks made from one reference row, and the problem that made none, if any."""
    reference = normalise(row["reference"])
    checked = sandbox.run(reference, row["tests"], reference)
    if checked.status != Status.PASSED:
        return [], f"{row['id']}: the reference does not pass its tests: {checked.failures()}"
    found = bugs(reference, row["tests"], row["id"], sandbox)
    tasks = [{"id": f"{row['id']}/{k}", "description": row["description"], "reference": reference,
              "buggy": bug.code, "bug": bug.description, "tests": row["tests"]} for k, bug in enumerate(found, 1)]
    return tasks, None if tasks else f"{row['id']}: no mutation fails a test"


def make(references: Path, sandbox: Sandbox, workers: int = 2) -> Iterator[tuple[list[dict[str, Any]], str | None]]:
    rows = [json.loads(line) for line in references.read_text().splitlines() if line.strip()]
    with ThreadPoolExecutor(workers) as pool:
        yield from pool.map(lambda row: tasks_of(row, sandbox), rows)


def main(argv: list[str]) -> int:
    references = Path(argv[0]) if argv else REFERENCES
    out = Path(argv[1]) if len(argv) > 1 else SHIPPED
    sandbox = Sandbox(Limits(cpu_s=2, wall_s=20))
    lines, made = [], 0
    for tasks, problem in make(references, sandbox):
        if problem:
            print(f"skipped {problem}", file=sys.stderr)
        lines += [json.dumps(task) + "\n" for task in tasks]
        made += bool(tasks)
    out.write_text("".join(lines))
    read_tasks(out, split=None)  # the file reads back as tasks
    print(f"{len(lines)} tasks from {made} references -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
