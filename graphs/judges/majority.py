"""majority@N: the most frequent parsed answer of an episode (ties go to the latest), and
whether it is right. Math-reflection, ensemble and discussion vote with it."""

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


def majority_correct(answers: list[tuple[str | None, float | None]]) -> float:
    """Correctness of the majority answer of (parsed answer, correctness) pairs (0 when no
    answer was parsed)."""
    index = majority_index([parsed for parsed, _ in answers])
    return 0.0 if index is None else answers[index][1] or 0.0
