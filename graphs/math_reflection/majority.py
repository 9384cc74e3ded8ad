"""majority@N: the most frequent parsed answer of an episode (ties go to the latest)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def majority_index(answers: Sequence[str | None]) -> int | None:
    """The position of the majority answer's latest occurrence: the most frequent parsed
    answer, a tie going to the answer given last; None when no answer was parsed."""
    counts = Counter(answer for answer in answers if answer is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(i for i in reversed(range(len(answers))) if answers[i] is not None and counts[answers[i]] == top)
