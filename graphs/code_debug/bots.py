"""Scripted bots of code-debug (``--seat breaker=scripted:mutator``, ``--seat fixer=scripted:mutation-undo``).

Both read the code block of the conversation's first message and answer with one seeded
single-site mutation of it (``graphs.code_debug.mutate``), chosen by the request's seed (0 when
greedy), so sampled siblings differ. As a breaker that is a bug; as a fixer it is a baseline
that undoes a bug of the same kind when it happens to pick the right site.
"""

from __future__ import annotations

import random

from graphs.code_debug.code import extract_code
from graphs.code_debug.mutate import mutations
from graphs.policies.base import GenerationRequest, Message


def mutator(messages: list[Message], request: GenerationRequest) -> str:
    """A breaker: one seeded mutation of the correct function it was shown."""
    return _one_mutation(messages, request, "Here is the function with a bug")


def mutation_undo(messages: list[Message], request: GenerationRequest) -> str:
    """A fixer: one seeded single-site change of the buggy function it was shown."""
    return _one_mutation(messages, request, "Here is my fix")


def _one_mutation(messages: list[Message], request: GenerationRequest, lead: str) -> str:
    code = extract_code(messages[0]["content"]) if messages else None
    try:
        options = mutations(code) if code else []
    except SyntaxError:
        options = []
    if not options:
        return "I found no code I can change."
    chosen = random.Random(request.sampling.seed or 0).choice(options)
    return f"{lead} ({chosen.description}):\n\n```python\n{chosen.code}```"


BOTS = {"mutator": mutator, "mutation-undo": mutation_undo}
