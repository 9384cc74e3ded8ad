"""The typed state of a math-reflection episode.

Every list grows by one entry per step (the reducer appends), so the state is the episode's
history: ``answers[i]``, ``correct[i]`` and ``critiques[i]`` belong to round i.
"""

from __future__ import annotations

import operator
from typing import Annotated, TypedDict


class Answer(TypedDict):
    turn_id: str
    round: int
    text: str
    """the actor's whole response (what the critic reviews)"""
    value: str | None
    """the final answer parsed from it, None when unparseable"""


class Critique(TypedDict):
    turn_id: str
    round: int
    text: str
    verdict: bool | None
    """True: the critic says the answer is correct; None: no parseable verdict"""
    verdict_correct: bool | None
    """whether the verdict matches the truth (None when the task has no ground truth)"""
    constrained: bool
    """whether the verdict line was chosen by constrained decoding (else parsed from free text)"""
    notes: str | None
    """the arithmetic checker's notes on the reviewed answer, which the critic saw and a refinement
    after it sees (None: no wrong step found, or ``options.checker`` off)"""


class State(TypedDict):
    answers: Annotated[list[Answer], operator.add]
    correct: Annotated[list[bool | None], operator.add]
    """ground-truth correctness of each answer (None when the task has no ground truth)"""
    critiques: Annotated[list[Critique], operator.add]
