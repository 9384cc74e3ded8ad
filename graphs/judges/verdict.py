"""Parse a critic's closing "Verdict: correct" or "Verdict: incorrect"."""

from __future__ import annotations

import re

_VERDICT = re.compile(r"verdict\s*[*_]*\s*[:：]\s*[*_`\s]*(incorrect|correct)\b", re.IGNORECASE)


def parse_verdict(text: str) -> bool | None:
    """True for "correct", False for "incorrect" (the last verdict line counts; markdown such
    as ``**Verdict:** *Incorrect*`` is fine); None when there is no verdict."""
    matches = _VERDICT.findall(text)
    if not matches:
        return None
    return matches[-1].lower() == "correct"
