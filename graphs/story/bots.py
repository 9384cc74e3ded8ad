"""Scripted co-writers (``--seat co_writer=scripted:NAME``), reading the constraints back from
the passage prompt (``graphs/story/prompts.py``).

- ``story-template``: restates one fact through one character with a template ("Mara
  remembered that the lighthouse is red."), both picked by the request's seed, so two sampled
  candidates usually differ; on the last turn it names every character and writes the ending.
  It keeps every constraint: a consistent partner, and a writer stand-in for tests.
- ``story-contradiction``: negates one of the facts on purpose ("... Mara is not afraid of
  water."), to test that the judge catches it; on the last turn it still writes the ending.
"""

from __future__ import annotations

import hashlib
import random
import re

from graphs.policies.base import GenerationRequest, Message
from graphs.story.prompts import CHARACTERS, ENDING_SENTENCE, FACTS, LAST_TURN

TEMPLATES = (
    "{who} remembered that {fact}.",
    "{who} knew that {fact}.",
    "{who} thought again about how {fact}.",
    "Everyone knew that {fact}, and {who} most of all.",
)
_NEGATABLE = re.compile(r"(?P<subject>.+?)\s+(?P<verb>is|are|was|were|has|have|can)\s+(?P<rest>.+)", re.IGNORECASE)
_NEGATION = {"is": "is not", "are": "are not", "was": "was not", "were": "were not", "has": "does not have",
             "have": "do not have", "can": "cannot"}


def story_template(messages: list[Message], request: GenerationRequest) -> str:
    prompt = _Prompt(messages)
    rng = prompt.rng(request)
    if prompt.last:
        return prompt.ending()
    return rng.choice(TEMPLATES).format(who=rng.choice(prompt.characters), fact=_lower(rng.choice(prompt.facts)))


def story_contradiction(messages: list[Message], request: GenerationRequest) -> str:
    prompt = _Prompt(messages)
    negated = [n for n in map(negate, prompt.facts) if n]
    twist = f"Then, to everyone's surprise, {_lower(prompt.rng(request).choice(negated))}." if negated else \
        "Then nothing that anyone had believed was true any more."
    return f"{twist} {prompt.ending()}" if prompt.last else twist


def negate(fact: str) -> str | None:
    """ "Mara is afraid of water" -> "Mara is not afraid of water" (None for another form)."""
    match = _NEGATABLE.fullmatch(fact.rstrip(". "))
    if match is None:
        return None
    return f"{match['subject']} {_NEGATION[match['verb'].lower()]} {match['rest']}"


def _lower(text: str) -> str:
    """Lower-case a leading article so the fact reads inside a sentence (names keep their case)."""
    first, _, rest = text.partition(" ")
    return f"{first.lower()} {rest}" if first in ("The", "A", "An") else text


class _Prompt:
    def __init__(self, messages: list[Message]) -> None:
        self.text = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        lines = self.text.splitlines()
        self.characters = [name.strip() for line in lines if line.startswith(CHARACTERS)
                           for name in line.removeprefix(CHARACTERS).split(",")] or ["Someone"]
        start = lines.index(FACTS) + 1 if FACTS in lines else len(lines)
        self.facts: list[str] = []
        for line in lines[start:]:
            if not line.startswith("- "):
                break
            self.facts.append(line[2:])
        self.facts = self.facts or ["the story went on"]
        self.sentence = next((line.removeprefix(ENDING_SENTENCE).strip('"') for line in lines
                              if line.startswith(ENDING_SENTENCE)), None)
        self.event = next((line.partition(": ")[2] for line in lines if line.startswith("Required ending event:")),
                          None)
        self.last = LAST_TURN in self.text

    def rng(self, request: GenerationRequest) -> random.Random:
        seed = request.sampling.seed
        if seed is None:
            seed = int.from_bytes(hashlib.blake2b(self.text.encode(), digest_size=4).digest(), "little")
        return random.Random(seed)

    def ending(self) -> str:
        cast = ", ".join(self.characters[:-1]) + f" and {self.characters[-1]}" if len(self.characters) > 1 \
            else self.characters[0]
        close = self.sentence or f"In the end, {self.event}."
        return f"{cast[0].upper()}{cast[1:]} were all there at the end. {close}"


BOTS = {"story-template": story_template, "story-contradiction": story_contradiction}
