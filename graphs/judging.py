"""A judge seat's rubric turns in an episode: a score of one side, or a preference between two.

A game's judge seat, when it has a model policy (the bundled model, an adapter, or any
``openai:MODEL`` for a stronger judge), is asked one rubric question (``graphs.judges.rubric``)
and ends its answer with a constrained final line (``Score: 1..N`` or ``Better: A|B``), so a
small model cannot fail the format. Every judgment is logged with the judge's policy, the
rubric's name, the score (normalised to 0..1) or the preference, and the judge's text as
rationale.

A judge that cannot constrain its line (a plain OpenAI-compatible API) and answers nonsense
raises ``JudgeError``: its episode fails with that cause, and the batch goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphs.context import EpisodeContext
from graphs.judges.rubric import PREFERENCE_LINE, Rubric, parse_better, parse_score, preference_messages, score_messages


class JudgeError(RuntimeError):
    """A judge's answer that names no score or no preference."""


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
