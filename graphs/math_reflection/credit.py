"""The critic's credit in math-reflection: ``verdict_correct + improvement``.

Improvement looks at the actor's answers around the critique: +1 if the actor's next answer
is correct and the answer the critic reviewed was not, -1 if the reviewed answer was correct
and the next one is not, 0 otherwise, and 0 when the actor gave no next answer. A critique
without a ``verdict_correct`` event (a task without ground truth) has no credit. The actor's
credit is the default one: its ``correct`` reward (1/0, 0 for an unparsed answer).
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.credit import CORRECT, CreditRule, CreditTurn

VERDICT_CORRECT = "verdict_correct"


def critic_credits(turns: Sequence[CreditTurn], role: str) -> dict[str, float]:
    credits: dict[str, float] = {}
    answers = [t for t in turns if t.seat == "actor"]
    for turn in turns:
        if not (turn.selected and turn.seat == role and VERDICT_CORRECT in turn.rewards):
            continue
        earlier = [a for a in answers if a.idx < turn.idx]
        reviewed = earlier[-1] if earlier else None
        following = next((a for a in answers if a.idx > turn.idx), None)
        credits[turn.turn_id] = turn.rewards[VERDICT_CORRECT] + improvement(reviewed, following)
    return credits


def improvement(reviewed: CreditTurn | None, following: CreditTurn | None) -> float:
    """+1 incorrect -> correct, -1 correct -> incorrect, 0 otherwise (or without both answers
    checked against ground truth)."""
    if reviewed is None or following is None or CORRECT not in reviewed.rewards or CORRECT not in following.rewards:
        return 0.0
    before, after = reviewed.rewards[CORRECT] >= 0.5, following.rewards[CORRECT] >= 0.5
    return float(after) - float(before)


CRITIC_CREDIT = CreditRule(critic_credits, reads=("actor",))
