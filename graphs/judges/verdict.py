"""Parse a critic's verdict: its closing "Verdict: correct|incorrect" line, or failing that a
plain sentence judging the solution ("The proposed solution is incorrect.").

The fallback exists because the bundled 135M critic states its judgement in prose far more
often than on the requested line (167 of 182 critiques in a held-out run). It only reads a
sentence whose subject is the solution or answer, so "The correct answer is: 0" is no verdict.

Since the critic's verdict line is chosen by constrained decoding (graphs/policies/final_line.py),
a critique from a backend that can constrain always ends with a verdict line; the fallback
serves backends that cannot (a plain OpenAI-compatible API) and turns logged before.
"""

from __future__ import annotations

import re

_VERDICT = re.compile(r"verdict\s*[*_]*\s*[:：]\s*[*_`\s]*(incorrect|correct)\b", re.IGNORECASE)
_SENTENCE = re.compile(
    r"\b(?:solution|answer|response|it)\s+(?:is|was)\s+(not\s+)?[*_]*(incorrect|correct|wrong|right)\b",
    re.IGNORECASE,
)


def parse_verdict(text: str) -> bool | None:
    """True for "correct", False for "incorrect" (the last verdict line counts; markdown such
    as ``**Verdict:** *Incorrect*`` is fine); without a verdict line, the first sentence that
    judges the solution; None when there is neither."""
    matches = _VERDICT.findall(text)
    if matches:
        return matches[-1].lower() == "correct"
    sentence = _SENTENCE.search(text)
    if sentence is None:
        return None
    positive = sentence.group(2).lower() in ("correct", "right")
    return positive != bool(sentence.group(1))
