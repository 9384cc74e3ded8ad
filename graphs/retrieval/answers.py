"""The researcher's text actions, and how an answer is checked against the gold one.

A small model does not write OpenAI tool-call JSON reliably, so the researcher writes one
line: ``Search: <keywords>`` or ``Answer: <answer> [doc ids]``. The first such line of a
reply is its action (markdown emphasis and case do not matter); a reply with neither is read
as an answer in prose (``read_reply``), so a model that has not learnt the format yet can
still be right, and its turn is logged as unparsed (the ``answer_format`` metric counts them).

Answers are compared after normalisation (case, accents, punctuation, articles, thousands
separators): an answer is right when the gold answer (or an alias) appears in it as whole
words, "1,843." and "It was finished in 1843" both match "1843", "18430" does not, and it is
short (``MAX_ANSWER_WORDS``): pasting the search results back states every number in them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

_ACTION = re.compile(r"^[\s*_#>`-]*(search|answer)[\s*_`]*[:：][\s*_`]*(.*)$", re.IGNORECASE | re.MULTILINE)
_CITATION = re.compile(r"\[([^\[\]]*)\]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_ARTICLES = {"a", "an", "the"}
MAX_ANSWER_WORDS = 16
"""an answer of more words is wrong whatever it contains (a document pasted back is longer)"""


@dataclass(frozen=True)
class Action:
    kind: Literal["search", "answer"]
    text: str
    """the query, or the answer without its citations"""
    cited: tuple[str, ...] = ()
    """the doc ids in the answer's square brackets, in order, each once"""

    def canonical(self) -> str:
        if self.kind == "search":
            return f"Search: {self.text}"
        return f"Answer: {self.text}" + (f" [{', '.join(self.cited)}]" if self.cited else "")


def parse_action(text: str) -> Action | None:
    """The reply's first ``Search:`` or ``Answer:`` line; None when it has neither."""
    match = _ACTION.search(text)
    if match is None:
        return None
    kind, rest = match[1].lower(), match[2].strip().strip("*_`").strip()
    if kind == "search":
        return Action("search", rest.strip("\"'“”").strip())
    cited = [doc_id.strip().strip("\"'") for group in _CITATION.findall(rest) for doc_id in group.split(",")]
    answer = " ".join(_CITATION.sub(" ", rest).split()).rstrip(" .;,")
    return Action("answer", answer, tuple(dict.fromkeys(doc_id for doc_id in cited if doc_id)))


def read_reply(text: str) -> tuple[Action | None, bool]:
    """A reply's action and whether it was written as one: its action line, else the whole
    reply as an answer in prose that cites nothing (only an 'Answer:' line cites), None for an
    empty reply."""
    action = parse_action(text)
    if action is not None:
        return action, True
    prose = " ".join(_CITATION.sub(" ", text).split())
    return (Action("answer", prose) if prose else None), False


def canonical_action(text: str) -> str | None:
    """The parser a researcher turn is logged with (its parsed value)."""
    action = parse_action(text)
    return None if action is None else action.canonical()


def normalise(text: str) -> list[str]:
    """The words of ``text`` as compared: lower case, no accents, no punctuation (a decimal
    point between digits stays), no thousands separators, no articles."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    text = _THOUSANDS.sub("", text)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)
    return [word for word in re.sub(r"[^\w.]+", " ", text).split() if word not in _ARTICLES]


def mentions(answer: str, value: str) -> bool:
    """Whether ``value``'s words appear in ``answer`` as consecutive whole words."""
    words, wanted = normalise(answer), normalise(value)
    if not wanted:
        return False
    return any(words[i:i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


def matches(answer: str | None, gold: Iterable[str]) -> bool:
    """Whether ``answer`` states the gold answer or one of its aliases."""
    return answer is not None and any(mentions(answer, value) for value in gold)


def states(answer: str | None, gold: Iterable[str]) -> bool:
    """Whether a researcher's answer is right: it ``matches`` and has at most MAX_ANSWER_WORDS words."""
    return answer is not None and len(normalise(answer)) <= MAX_ANSWER_WORDS and matches(answer, gold)


def numbers(text: str) -> set[str]:
    """The numbers written in ``text``, normalised ("12,480" -> "12480")."""
    return {value.replace(",", "").rstrip(".") for value in _NUMBER.findall(text)}
