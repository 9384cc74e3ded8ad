"""Distractors: near-miss documents the planter adds to one episode's search index.

The planter is shown the gold document that holds the answer and names a subject close to it
(``New Velmora`` for ``Velmora``) and a value close to the answer. The distractor is the gold
document with that name and that value put in (``plant``): bm25 ranks it next to the gold one,
and a careful reader tells them apart by the name. The planter replies with two short lines,
so a small model can play the seat and a scripted reply fits any token limit. The rule planter
(``near_miss_plan``, the ``near-miss`` bot) moves years by 1-12 and other numbers by 8-30%.
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection

from graphs.policies.base import Message
from graphs.retrieval.answers import numbers
from graphs.retrieval.corpus import Document

_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\d])")
_VARIANTS = ("New {}", "Old {}", "Little {}", "Upper {}", "{} II")
_NAME_LINE = re.compile(r"^[\s*_#]*name[\s*_]*:[\s*_]*(.+)$", re.IGNORECASE | re.MULTILINE)
_VALUE_LINE = re.compile(r"^[\s*_#]*value[\s*_]*:[\s*_]*(.+)$", re.IGNORECASE | re.MULTILINE)

PLANTER_INSTRUCTIONS = (
    "You help test a search engine with a distractor: an entry like the one below about a different "
    "subject with a similar name, stating a different value. Reply in two lines:\n"
    "Name: <a name close to the subject's>\nValue: <a value close to, but not, the one to change>"
)


def subject(title: str) -> str:
    """The name a title gives its subject ("The Quiet Atlas" -> "Quiet Atlas", "Momwyn (river)" -> "Momwyn")."""
    return re.sub(r"^the\s+|\s*\([^)]*\)$", "", title, flags=re.IGNORECASE).strip() or title


def planter_messages(gold: Document, value: str, index: int, count: int) -> list[Message]:
    return [{
        "role": "user",
        "content": f"{PLANTER_INSTRUCTIONS}\n\nEntry: {gold.text}\nSubject: {subject(gold.title)}\n"
                   f"Value to change: {value}\nDistractor {index + 1} of {count}.",
    }]


def read_planter_prompt(prompt: str) -> tuple[str, str] | None:
    """(subject, value to change) from a planter prompt; None when it is not one."""
    found = [re.search(rf"^{label}: (.*)$", prompt, re.MULTILINE) for label in ("Subject", "Value to change")]
    return None if found[0] is None or found[1] is None else (found[0][1], found[1][1])


def parse_plan(text: str) -> tuple[str, str] | None:
    """(name, value) from a planter's reply; None without both lines."""
    name, value = _NAME_LINE.search(text), _VALUE_LINE.search(text)
    if name is None or value is None:
        return None
    return subject(" ".join(name[1].strip("*_ ").split())), value[1].strip("*_ .")


def near_miss_plan(name: str, value: str, rng: random.Random) -> tuple[str, str] | None:
    """The rule planter's reply: a variant of the subject's name and a close number; None
    when the value is no number."""
    wrong = near_miss_value(value, rng)
    return None if wrong is None else (rng.choice(_VARIANTS).format(name), wrong)


def plant(gold: Document, value: str, name: str, wrong: str, doc_id: str) -> Document | None:
    """The gold document about ``name`` instead of its subject, stating ``wrong`` where it
    states ``value``; None unless that renames the subject and changes a number it states."""
    core = subject(gold.title)
    target = value.strip().replace(",", "")
    if not name or name.lower() == core.lower() or wrong.replace(",", "") == target:
        return None
    text = _NUMBER.sub(lambda m: _like(m[0], wrong) if m[0].replace(",", "") == target else m[0], gold.text)
    if text == gold.text:
        return None
    renamed = re.sub(rf"(?<!\w){re.escape(core)}(?!\w)", name, text, flags=re.IGNORECASE)
    return Document(doc_id, gold.title.replace(core, name), renamed)


def near_miss_value(value: str, rng: random.Random) -> str | None:
    """A close but different number: a year (1000-2100) moved by 1-12, another integer by
    8-30% (at least 1), a decimal likewise at its precision; None for no number."""
    plain = value.strip().replace(",", "")
    if not re.fullmatch(r"\d+(?:\.\d+)?", plain):
        return None
    sign = rng.choice((-1, 1))
    if "." in plain:
        places = len(plain.split(".")[1])
        number = float(plain)
        moved = number + sign * max(10 ** -places, round(number * rng.uniform(0.08, 0.3), places))
        return f"{abs(moved):.{places}f}"
    number = int(plain)
    step = rng.randint(1, 12) if 1000 <= number <= 2100 else max(1, round(number * rng.uniform(0.08, 0.3)))
    moved = number + sign * step
    return str(moved if moved > 0 else number + step)


def _like(original: str, value: str) -> str:
    """``value`` written as ``original`` was (with thousands separators or without)."""
    plain = value.replace(",", "")
    if "," not in original or not plain.isdigit():
        return value
    return f"{int(plain):,}"


def planted_id(gold_id: str, taken: Collection[str], rng: random.Random) -> str:
    """An id that looks like the gold document's (same prefix, same number of digits) and is
    not taken, so an id never gives a distractor away."""
    match = re.fullmatch(r"(.*?)(\d+)", gold_id)
    prefix, digits = (match[1], len(match[2])) if match else (f"{gold_id}-", 3)
    while True:
        for _ in range(100):
            candidate = f"{prefix}{rng.randrange(1, 10 ** digits):0{digits}d}"
            if candidate not in taken:
                return candidate
        digits += 1  # nearly every id of this length is taken


def wrong_values(planted: Document, gold: Document) -> set[str]:
    """The numbers a distractor states that its gold document does not."""
    return numbers(planted.text) - numbers(gold.text)
