"""The constraints of one story task, read from a task-file row and kept in ``Task.meta``.

A row (one JSON object per line; see ``graphs/story/tasks.py`` for the file format) becomes a
``Constraints``; every problem is a ``ValueError`` whose message says which key is wrong and
how to fix it (the task loader adds the file and line).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_MAX_WORDS = 60
KEYS = {"id", "premise", "characters", "facts", "forbidden", "ending", "max_words"}
REQUIRED = ("id", "premise", "characters", "facts", "ending")


@dataclass(frozen=True)
class Fact:
    text: str
    """what must stay true, e.g. "Mara is afraid of water" """
    contradictions: tuple[str, ...] = ()
    """regular expressions (case-insensitive) that contradict it, e.g. "Mara (?:swam|dived)" """


@dataclass(frozen=True)
class Ending:
    sentence: str | None = None
    """the sentence the story must end with (matched ignoring case, spacing and punctuation)"""
    event: str | None = None
    """an event the last passage must show, with ``mentions``"""
    mentions: tuple[str, ...] = ()
    """for an event: words the last passage must all contain; "lit|lights" accepts either"""

    def describe(self) -> str:
        return f'the story ends with the sentence "{self.sentence}"' if self.sentence else \
            f"the story ends with this event: {self.event}"


@dataclass(frozen=True)
class Constraints:
    premise: str
    characters: tuple[str, ...]
    facts: tuple[Fact, ...]
    ending: Ending
    forbidden: tuple[str, ...] = ()
    """phrases no passage may contain (ignoring case)"""
    max_words: int = DEFAULT_MAX_WORDS
    """the most words a passage may have"""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Constraints:
        """The inverse of ``to_dict`` (what ``Task.meta["constraints"]`` holds)."""
        ending = data["ending"]
        return cls(
            premise=data["premise"],
            characters=tuple(data["characters"]),
            facts=tuple(Fact(f["text"], tuple(f["contradictions"])) for f in data["facts"]),
            ending=Ending(ending["sentence"], ending["event"], tuple(ending["mentions"])),
            forbidden=tuple(data["forbidden"]),
            max_words=data["max_words"],
        )


def parse_row(row: Any) -> Constraints:
    """A task-file row's constraints; ValueError naming the key and the fix when it is malformed."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {type(row).__name__}")
    unknown = sorted(set(row) - KEYS)
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(map(repr, unknown))}; a story row has the keys "
                         f"{', '.join(sorted(KEYS))}")
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        raise ValueError(f"missing key(s) {', '.join(map(repr, missing))} (required: {', '.join(REQUIRED)})")
    _text(row["id"], "id")
    characters = _texts(row["characters"], "characters", nonempty=True)
    facts = tuple(_fact(item, i) for i, item in enumerate(_list(row["facts"], "facts")))
    forbidden = _texts(row.get("forbidden", []), "forbidden")
    max_words = row.get("max_words", DEFAULT_MAX_WORDS)
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 5:
        raise ValueError(f"'max_words' must be a whole number of at least 5, got {max_words!r}")
    constraints = Constraints(_text(row["premise"], "premise"), characters, facts, _ending(row["ending"]),
                              forbidden, max_words)
    _check_ending_is_possible(constraints)
    return constraints


def _fact(item: Any, index: int) -> Fact:
    where = f"facts[{index}]"
    if isinstance(item, str):
        return Fact(_text(item, where))
    if not isinstance(item, dict) or "text" not in item or set(item) - {"text", "contradictions"}:
        raise ValueError(f"{where} must be a string or an object with 'text' and optional 'contradictions' "
                         f"(a list of regular expressions), got {item!r}")
    text = _text(item["text"], f"{where}.text")
    patterns = _texts(item.get("contradictions", []), f"{where}.contradictions")
    for pattern in patterns:
        try:
            compiled = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"{where}.contradictions: {pattern!r} is not a valid regular expression ({exc}); "
                             "escape special characters such as ( or ? with a backslash") from None
        if compiled.search(text):
            raise ValueError(f"{where}.contradictions: {pattern!r} matches the fact itself ({text!r}), so every "
                             "passage that restates the fact would count as a contradiction; narrow the pattern")
    return Fact(text, patterns)


def _ending(value: Any) -> Ending:
    if not isinstance(value, dict):
        raise ValueError(f"'ending' must be an object: {{\"sentence\": \"...\"}} or {{\"event\": \"...\", "
                         f"\"mentions\": [...]}}, got {value!r}")
    if "sentence" in value and set(value) == {"sentence"}:
        return Ending(sentence=_text(value["sentence"], "ending.sentence"))
    if "event" in value and set(value) == {"event", "mentions"}:
        mentions = _texts(value["mentions"], "ending.mentions", nonempty=True)
        return Ending(event=_text(value["event"], "ending.event"), mentions=mentions)
    raise ValueError(f"'ending' must be {{\"sentence\": \"...\"}} or {{\"event\": \"...\", \"mentions\": [...]}} "
                     f"(exactly those keys), got the keys {sorted(value)}")


def _check_ending_is_possible(constraints: Constraints) -> None:
    """An ending that the judge's own rules would flag can never be reached: refuse the row."""
    from graphs.story.rules import contradicted, ending_reached, forbidden_found, word_count

    ending = constraints.ending.sentence or constraints.ending.event or ""
    if (found := forbidden_found(ending, constraints.forbidden)):
        raise ValueError(f"the ending contains the forbidden phrase {found[0]!r}; change one of them")
    if (broken := contradicted(ending, constraints.facts)):
        raise ValueError(f"the ending contradicts the fact {broken[0]!r}; change one of them")
    if constraints.ending.event and not ending_reached(ending, constraints.ending):
        raise ValueError(f"the ending event {ending!r} does not contain all of its own mentions "
                         f"{list(constraints.ending.mentions)}; add the word forms the event uses")
    if constraints.ending.sentence and word_count(ending) > constraints.max_words:
        raise ValueError(f"the ending sentence has more than max_words={constraints.max_words} words; "
                         "raise max_words or shorten the sentence")


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{key!r} must be non-empty text, got {value!r}")
    return value.strip()


def _list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{key!r} must be a JSON list, got {type(value).__name__}: {value!r}")
    return value


def _texts(value: Any, key: str, *, nonempty: bool = False) -> tuple[str, ...]:
    items = _list(value, key)
    if nonempty and not items:
        raise ValueError(f"{key!r} must list at least one entry")
    return tuple(_text(item, f"{key}[{i}]") for i, item in enumerate(items))
