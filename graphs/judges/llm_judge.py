"""Parse an LLM judge's decision between two debaters: "Winner: A" or "Winner: B"."""

from __future__ import annotations

import re
from typing import Literal

_WINNER = re.compile(r"winner\s*[*_]*\s*[:：]\s*[*_`\s]*(?:debater[\s_]*)?([AB])\b", re.IGNORECASE)


def parse_winner(text: str) -> Literal["a", "b"] | None:
    """ "a" or "b" from the last "Winner: A" / "Winner: Debater B" line (any case, markdown
    tolerated); None when the judge named no winner."""
    matches = _WINNER.findall(text)
    if not matches:
        return None
    return "a" if matches[-1].lower() == "a" else "b"
