"""LLM judges on a named rubric: a score of one side, or a preference between two.

A game's judge seat, when it has a model policy (the bundled model, an adapter, or any
``openai:MODEL`` for a stronger judge), is asked one rubric question and ends its answer with
a constrained final line (``Score: 1..N`` or ``Better: A|B``), so a small model cannot fail
the format. Every judgment is logged with the judge's policy, the rubric's name, the score
(normalised to 0..1) or the preference, and the judge's text as rationale.

A judge that cannot constrain its line (a plain OpenAI-compatible API) and answers nonsense
raises ``JudgeError``: its episode fails with that cause, and the batch goes on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graphs.context import EpisodeContext
from graphs.policies.base import Message
from graphs.policies.final_line import FinalChoice


class JudgeError(RuntimeError):
    """A judge's answer that names no score or no preference."""


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


@dataclass(frozen=True)
class Scored:
    score: float
    """normalised to 0..1"""
    raw: int
    rationale: str
    judge_turn_id: str


async def judge_score(
    ctx: EpisodeContext, judge_seat: str, rubric: Rubric, material: str, *, scored_seat: str | None, round: int
) -> Scored:
    """Ask the judge seat's model for a rubric score of ``material``; log it as a judgment."""
    turn = await ctx.generate(
        judge_seat,
        score_messages(rubric, material),
        round=round,
        parse=lambda text: _str(parse_score(text, rubric)),
        final=rubric.score_line,
    )
    if turn.parsed is None:
        raise JudgeError(f"judge {judge_seat!r} gave no 'Score: 1..{rubric.scale}' for {rubric.name}: "
                         f"{turn.text[-200:]!r}")
    raw = int(turn.parsed)
    scored = Scored((raw - 1) / (rubric.scale - 1), raw, turn.text, turn.id)
    ctx.judgment(
        judge_seat=judge_seat,
        winner_seat=None,
        loser_seat=None,
        preferred_turn_id=None,
        rejected_turn_id=None,
        rationale=turn.text,
        judge_turn_id=turn.id,
        rubric=rubric.name,
        score=scored.score,
        scored_seat=scored_seat,
    )
    return scored


@dataclass(frozen=True)
class Side:
    seat: str
    turn_id: str
    text: str


async def judge_preference(
    ctx: EpisodeContext, judge_seat: str, rubric: Rubric, context: str, a: Side, b: Side, *, round: int
) -> Side:
    """Ask the judge seat's model which of two sides' texts is better on the rubric; log the
    preference (preferred and rejected turns: a DPO pair when they share a state) and return
    the winner."""
    turn = await ctx.generate(
        judge_seat,
        preference_messages(rubric, context, a.text, b.text),
        round=round,
        parse=parse_better,
        final=PREFERENCE_LINE,
    )
    if turn.parsed is None:
        raise JudgeError(f"judge {judge_seat!r} named no 'Better: A|B' for {rubric.name}: {turn.text[-200:]!r}")
    winner, loser = (a, b) if turn.parsed == "A" else (b, a)
    ctx.judgment(
        judge_seat=judge_seat,
        winner_seat=winner.seat,
        loser_seat=loser.seat,
        preferred_turn_id=winner.turn_id,
        rejected_turn_id=loser.turn_id,
        rationale=turn.text,
        judge_turn_id=turn.id,
        rubric=rubric.name,
    )
    return winner


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)
