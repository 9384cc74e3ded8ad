"""A named rubric for LLM judges: its question, the prompts that ask for a score of one side
or a preference between two, and the readers of the judge's final line (``Score: 1..N``,
``Better: A|B``). The judge seat's turns that use them are ``graphs.judging``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from graphs.policies.base import Message
from graphs.policies.final_line import FinalChoice


@dataclass(frozen=True)
class Rubric:
    name: str
    """logged with each judgment: "fairness", "consistency", "creativity", "relevance", ..."""
    question: str
    """what the judge is asked about the material, e.g. "How fair is the deal to both sides?" """
    scale: int = 5
    """scores are 1..scale; logged normalised to 0..1"""

    def __post_init__(self) -> None:
        if not 2 <= self.scale <= 9:
            raise ValueError(f"rubric {self.name!r}: scale must be 2..9 (one digit), not {self.scale}")

    @property
    def score_line(self) -> FinalChoice:
        return FinalChoice("Score:", tuple(f" {i}" for i in range(1, self.scale + 1)))


PREFERENCE_LINE = FinalChoice("Better:", (" A", " B"))
_SCORE = re.compile(r"score\s*[*_]*\s*[:：]\s*[*_`\s]*([1-9])\b", re.IGNORECASE)
_BETTER = re.compile(r"better\s*[*_]*\s*[:：]\s*[*_`\s]*([AB])\b", re.IGNORECASE)


def parse_score(text: str, rubric: Rubric) -> int | None:
    """The last "Score: N" with N on the rubric's scale; None when there is none."""
    found = [int(m) for m in _SCORE.findall(text) if 1 <= int(m) <= rubric.scale]
    return found[-1] if found else None


def parse_better(text: str) -> str | None:
    """ "A" or "B" from the last "Better: A|B" line; None when the judge named neither."""
    found = _BETTER.findall(text)
    return found[-1].upper() if found else None


def score_messages(rubric: Rubric, material: str) -> list[Message]:
    return [
        {
            "role": "system",
            "content": f"You are a strict judge. {rubric.question} Explain briefly, then end with "
            f"a line 'Score: N' where N is 1 (worst) to {rubric.scale} (best).",
        },
        {"role": "user", "content": material},
    ]


def preference_messages(rubric: Rubric, context: str, a: str, b: str) -> list[Message]:
    return [
        {
            "role": "system",
            "content": f"You are a strict judge comparing two continuations. {rubric.question} "
            "Explain briefly, then end with a line 'Better: A' or 'Better: B'.",
        },
        {"role": "user", "content": f"{context}\n\n[A]\n{a}\n\n[B]\n{b}"},
    ]
