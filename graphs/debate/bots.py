"""The debate's scripted debaters: opponents with a fixed stance for pools, ratings and tests.
Each reads the debate's prompt (the other debater's latest argument in a "Debater X:" block)."""

from __future__ import annotations

import re

from graphs.judges.answers import extract_answer
from graphs.judges.arithmetic import evaluate, format_number
from graphs.policies.base import GenerationRequest, Message
from graphs.policies.scripted import Bot, calculate, calculator, last_user


def stubborn(messages: list[Message], request: GenerationRequest) -> str:
    """A debater that answers like ``calculator`` in its first turn and then restates the
    answer of its first turn whatever it is told."""
    own = [m["content"] for m in messages if m["role"] == "assistant"]
    if not own:
        return calculator(messages, request)
    first = extract_answer(own[0])
    return f"I stand by my first answer.\nAnswer: {first}" if first else "I stand by what I said."


def agreeable(messages: list[Message], request: GenerationRequest) -> str:
    """A debater that adopts the other debater's latest answer (``calculator``'s when it has
    heard none): a partner that never makes a debate decisive."""
    theirs = _other_answer(messages)
    if theirs is None:
        return calculator(messages, request)
    return f"I agree with the other debater.\nAnswer: {theirs}"


def contrarian(messages: list[Message], request: GenerationRequest) -> str:
    """A debater that always disputes the other debater's latest answer: it states its own
    calculation when that differs, else the other's number plus one (``calculator`` when it has
    heard none)."""
    theirs = _other_answer(messages)
    if theirs is None:
        return calculator(messages, request)
    first = next((m["content"] for m in messages if m["role"] == "user"), "")
    own = calculate(_OTHER_DEBATER.split(first)[0])  # the question, before any argument
    if own is not None and own != theirs:
        return f"The other debater is wrong.\nAnswer: {own}"
    value = evaluate(theirs)
    disputed = format_number(value + 1) if value is not None else "0"
    return f"The other debater is wrong.\nAnswer: {disputed}"


_OTHER_DEBATER = re.compile(r"^Debater [A-Z]:\n", re.MULTILINE)


def _other_answer(messages: list[Message]) -> str | None:
    """The answer of the other debater's latest argument: the "Debater X:" block of the last
    user message (debate's prompt), without the instruction paragraph that follows it."""
    blocks = _OTHER_DEBATER.split(last_user(messages))
    if len(blocks) < 2:
        return None
    argument = blocks[-1].rpartition("\n\n")[0] or blocks[-1]
    return extract_answer(argument)


BOTS: dict[str, Bot] = {"stubborn": stubborn, "agreeable": agreeable, "contrarian": contrarian}
