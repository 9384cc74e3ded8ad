"""The typed state of a code-debug episode: the bug, then each fix and its verdict (round i
of ``fixes`` and ``verdicts`` belong together)."""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict


class Bug(TypedDict):
    code: str
    source: Literal["task", "breaker", "mutator"]
    """the task's buggy code, the breaker's, or a seeded mutation when the breaker's was no bug"""
    report: str
    """what its tests say (shown to the fixer)"""


class Fix(TypedDict):
    turn_id: str
    attempt: int
    text: str
    code: str | None
    """the code found in the answer, None when it holds none"""


class Verdict(TypedDict):
    status: str
    """a sandbox status (passed, failed, syntax_error, violation, crashed) or no_code"""
    passed: int
    total: int
    violation: str | None
    cause: str
    report: str
    """what the tests say (shown to the fixer on its next attempt)"""


class State(TypedDict):
    bug: Bug | None
    fixes: Annotated[list[Fix], operator.add]
    verdicts: Annotated[list[Verdict], operator.add]
    quality: float | None
    """the judge model's code-quality score of the last fix (0..1), None without a judge model"""
