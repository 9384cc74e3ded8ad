"""The story judge's rules: consistency checks of one passage, and the creativity proxy.

Consistency (every passage, the writer's candidates and the co-writer's alike), one check each:

- each fact is not contradicted: the passage matches none of the fact's shipped
  ``contradictions`` (regular expressions, ignoring case) nor its automatic negation. A fact of
  the form "<subject> is|are|was|were <predicate>" is negated by "<subject> is not / isn't /
  was never / is no longer <predicate>" (any of is, are, was, were; articles inside the
  predicate optional; a leading "the" of the subject optional); "<subject> has|have <object>"
  by "has no / had no / does not have / doesn't have <object>"; "<subject> can <verb>" by
  "cannot / can't / could not <verb>". Pronouns ("she is not afraid") are not resolved: a task
  that needs them ships them as contradictions.
- each forbidden phrase is absent (ignoring case);
- the length: 1 to ``max_words`` words (whitespace-separated);
- the last writer passage only: the ending is reached (a sentence: the passage contains it,
  ignoring case, spacing and punctuation; an event: the passage contains every mention as a
  whole word, "a|b" accepting either) and each required character is named somewhere in the
  story (its full name or its last word, as a whole word, ignoring case).

The score of a passage is the share of its checks it passes (1.0: consistent).

Creativity proxy (used when the judge seat has no model): the number of distinct new words of
a passage, words of three letters or more that appear nowhere in what the writer was shown
(premise, constraints, story so far). It is a proxy, labelled so wherever it is logged
(rubric ``creativity-proxy``), not a judgment of quality.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphs.story.constraints import Constraints, Ending, Fact

_WORD = re.compile(r"[a-z][a-z']{2,}")
_COPULA = ("is", "are", "was", "were")


@dataclass(frozen=True)
class PassageCheck:
    violations: tuple[str, ...]
    """what the passage broke, in words ("contradicts: Mara is afraid of water")"""
    checks: int
    ending: bool | None = None
    """whether the ending is reached (None: not the last writer passage)"""

    @property
    def score(self) -> float:
        return (self.checks - len(self.violations)) / self.checks

    @property
    def consistent(self) -> bool:
        return not self.violations


def word_count(text: str) -> int:
    return len(text.split())


def _words(text: str) -> str:
    """Lower case, letters and digits only, single spaces (for matching sentences)."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _phrase(words: str) -> str:
    """A regex matching the words with any spacing, articles optional between them."""
    parts = [re.escape(w) for w in words.split() if w.lower() not in ("a", "an", "the")]
    return r"\s+(?:(?:a|an|the)\s+)?".join(parts)


@cache
def negation_pattern(fact: str) -> re.Pattern[str] | None:
    """The automatic negation of a fact (see the module docstring); None for other forms."""
    match = re.fullmatch(r"\s*(?:the\s+)?(?P<subject>.+?)\s+(?P<verb>is|are|was|were|has|have|can)\s+"
                         r"(?P<rest>.+?)[.!]?\s*", fact, re.IGNORECASE)
    if match is None or len(match["subject"].split()) > 4:
        return None
    subject = r"\b(?:the\s+)?" + _phrase(match["subject"])
    verb, rest = match["verb"].lower(), _phrase(match["rest"])
    if not rest:
        return None
    if verb in _COPULA:
        negated = r"(?:is|are|was|were)(?:n't|\s+not|\s+never|\s+no\s+longer)"
    elif verb in ("has", "have"):
        negated = r"(?:(?:has|have|had)\s+(?:no|never\s+had)|(?:does|do|did)(?:n't|\s+not)\s+have)"
    else:
        negated = r"(?:cannot|can't|can\s+not|could\s+not|couldn't)"
    return re.compile(rf"{subject}\s+{negated}\s+(?:(?:a|an|the)\s+)?{rest}\b", re.IGNORECASE)


@cache
def _patterns(fact: Fact) -> tuple[re.Pattern[str], ...]:
    shipped = tuple(re.compile(p, re.IGNORECASE) for p in fact.contradictions)
    automatic = negation_pattern(fact.text)
    return shipped + ((automatic,) if automatic else ())


def contradicted(text: str, facts: Sequence[Fact]) -> list[str]:
    """The facts the text contradicts."""
    return [fact.text for fact in facts if any(p.search(text) for p in _patterns(fact))]


def forbidden_found(text: str, forbidden: Sequence[str]) -> list[str]:
    lowered = " ".join(text.lower().split())
    return [phrase for phrase in forbidden if " ".join(phrase.lower().split()) in lowered]


def ending_reached(text: str, ending: Ending) -> bool:
    if ending.sentence is not None:
        return _words(ending.sentence) in _words(text)
    return all(re.search(rf"\b(?:{'|'.join(map(re.escape, m.split('|')))})\b", text, re.IGNORECASE)
               for m in ending.mentions)


def characters_missing(story: str, characters: Sequence[str]) -> list[str]:
    def named(name: str) -> bool:
        forms = {name, name.split()[-1]}
        return any(re.search(rf"\b{_phrase(form)}\b", story, re.IGNORECASE) for form in forms)

    return [name for name in characters if not named(name)]


def check_passage(text: str, constraints: Constraints, *, story_before: Sequence[str], last: bool) -> PassageCheck:
    """Every check of one passage (``last``: the writer's final passage, which must also reach
    the ending and complete the cast)."""
    violations = [f"contradicts: {fact}" for fact in contradicted(text, constraints.facts)]
    violations += [f"forbidden phrase: {phrase}" for phrase in forbidden_found(text, constraints.forbidden)]
    words = word_count(text)
    if words == 0:
        violations.append("empty passage")
    elif words > constraints.max_words:
        violations.append(f"too long: {words} words (at most {constraints.max_words})")
    checks = len(constraints.facts) + len(constraints.forbidden) + 1
    if not last:
        return PassageCheck(tuple(violations), checks)
    reached = ending_reached(text, constraints.ending)
    if not reached:
        violations.append(f"ending not reached: {constraints.ending.describe()}")
    violations += [f"character never named: {name}"
                   for name in characters_missing("\n".join([*story_before, text]), constraints.characters)]
    return PassageCheck(tuple(violations), checks + 1 + len(constraints.characters), ending=reached)


def new_words(text: str, seen: str) -> int:
    """The creativity proxy: distinct words (3+ letters) of ``text`` that are not in ``seen``."""
    return len(set(_WORD.findall(text.lower())) - set(_WORD.findall(seen.lower())))
