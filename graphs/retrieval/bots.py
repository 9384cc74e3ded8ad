"""The retrieval game's scripted bots (``GameSpec.bots``: ``--seat SEAT=scripted:NAME``).

- ``near-miss`` (the planter's default): the rule planter's reply (``distractors.near_miss_plan``)
  to the planter prompt; the same prompt always gives the same reply. Like every scripted reply
  it is cut at --max-new-tokens counted in bytes: its 40-70 bytes need 64 or so, and a cut reply
  plants nothing.
- ``keyword-lookup`` (a researcher baseline, not an oracle): answers from the results in front
  of it (searching the question's words when there are none) with the last number of the top
  result's sentence that shares the most words with the question, citing that result. It never
  follows a second hop and takes whatever ranks first, distractors included.
"""

from __future__ import annotations

import hashlib
import random
import re

from graphs.policies.base import GenerationRequest, Message
from graphs.retrieval.distractors import near_miss_plan, read_planter_prompt

NO_DISTRACTOR = "No distractor: the value to change is no number."
_RESULT = re.compile(r"^\[([^\]]+)\] (.*)$", re.MULTILINE)
_QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)
_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\d[\d,]*")
_COMMON = {"in", "which", "what", "how", "many", "was", "is", "the", "of", "a", "did", "does", "year", "to"}


def near_miss_bot(messages: list[Message], request: GenerationRequest) -> str:
    prompt = messages[-1]["content"]
    entry = read_planter_prompt(prompt)
    if entry is None:
        return NO_DISTRACTOR
    rng = random.Random(hashlib.blake2b(prompt.encode(), digest_size=8).digest())
    plan = near_miss_plan(*entry, rng)
    return NO_DISTRACTOR if plan is None else f"Name: {plan[0]}\nValue: {plan[1]}"


def keyword_lookup_bot(messages: list[Message], request: GenerationRequest) -> str:
    found = _QUESTION.search(messages[0]["content"])
    question = found[1] if found else messages[0]["content"]
    results = _RESULT.findall(messages[-1]["content"])
    if not results:
        return f"Search: {question.rstrip('?')}" if len(messages) == 1 else "Answer: unknown"
    doc_id, text = results[0]
    wanted = {w.lower() for w in _WORD.findall(question)} - _COMMON
    sentences = [s for s in re.split(r"(?<=[.;])\s+", text.partition(": ")[2] or text) if _NUMBER.search(s)]
    if not sentences:
        return f"Answer: unknown [{doc_id}]"
    best = max(sentences, key=lambda s: len(wanted & {w.lower() for w in _WORD.findall(s)}))
    return f"Answer: {_NUMBER.findall(best)[-1].rstrip(',')} [{doc_id}]"


BOTS = {"near-miss": near_miss_bot, "keyword-lookup": keyword_lookup_bot}
