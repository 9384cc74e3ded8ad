"""Math-reflection's scripted critics: stand-ins for the critic seat (practice, baselines,
tests), each answering with the verdict line the game parses."""

from __future__ import annotations

from graphs.judges.arithmetic import checker_notes
from graphs.policies.base import GenerationRequest, Message
from graphs.policies.scripted import Bot, last_user


def always_correct(messages: list[Message], request: GenerationRequest) -> str:
    """A critic that approves everything."""
    return "The solution looks right to me.\nVerdict: correct"


def always_incorrect(messages: list[Message], request: GenerationRequest) -> str:
    """A critic that rejects everything."""
    return "Please check each step of the arithmetic again.\nVerdict: incorrect"


def arithmetic_checker(messages: list[Message], request: GenerationRequest) -> str:
    """A critic that checks the written steps "a op b (op c...) = d" of the last user message
    (the answer under review) with exact arithmetic and names the wrong ones with their right
    result; it does not judge the setup (a right sum of the wrong numbers passes). A tool for
    the refinement turn: a critique that says which number is wrong, and what it should be."""
    notes = checker_notes(last_user(messages))
    if notes is None:
        return "Every calculation I can check is right.\nVerdict: correct"
    return f"{notes}\nVerdict: incorrect"


BOTS: dict[str, Bot] = {
    "always-correct": always_correct,
    "always-incorrect": always_incorrect,
    "arithmetic-checker": arithmetic_checker,
}
