"""The fixed prompts of the ensemble game: an agent's question under its variant, and the
judge's choice among the agents' distinct answers.

Accuracy depends heavily on the prompt, so before/after comparisons are only valid while
these strings and the variants (``variants.py``) stay unchanged.
"""

from __future__ import annotations

import re

from graphs.ensemble.variants import VARIANTS
from graphs.policies.base import Message
from graphs.policies.final_line import FinalChoice

PICK_MARKER = "Pick:"
JUDGE_INSTRUCTIONS = (
    "Several solvers answered the problem below; their distinct answers are numbered, each with "
    "one solution that reached it. Decide which answer is correct. Explain in one or two sentences, "
    f"then end with '{PICK_MARKER} <number of the answer>'."
)
_PICK = re.compile(r"pick\s*[*_]*\s*[:：]\s*[*_`\s]*#?(\d+)", re.IGNORECASE)


def agent_messages(question: str, variant: str) -> list[Message]:
    return [{"role": "user", "content": f"{question}\n{VARIANTS[variant]}"}]


def judge_messages(question: str, candidates: list[tuple[str, str]]) -> list[Message]:
    """``candidates``: (answer, one solution that reached it), numbered from 1 in this order."""
    listed = "\n\n".join(
        f"Answer {i}: {answer}\nSolution:\n{solution}" for i, (answer, solution) in enumerate(candidates, start=1)
    )
    return [{"role": "user", "content": f"{JUDGE_INSTRUCTIONS}\n\nProblem:\n{question}\n\n{listed}"}]


def pick_line(count: int) -> FinalChoice:
    """The judge's last line: the marker and the number of one of ``count`` answers."""
    return FinalChoice(PICK_MARKER, tuple(f" {i}" for i in range(1, count + 1)))


def parse_pick(text: str, count: int) -> int | None:
    """The 0-based index of the answer the judge picked ("Pick: 2" -> 1), from its last pick
    line; None when it named none of the ``count`` answers."""
    matches = _PICK.findall(text)
    if not matches:
        return None
    number = int(matches[-1])
    return number - 1 if 1 <= number <= count else None
