"""The writer's credit: what the builders rank and filter its passages by.

``1 + 0.25 * creativity`` for a passage that keeps every constraint (creativity: 1 when the
judge preferred it over its sibling, 0 when it rejected it, nothing when it judged none), and
``consistency / 2`` (below 0.5) for one that breaks any. The builders' thresholds (SFT keeps
credit >= 0.5, KTO labels > 0.5 desirable) then never take a passage that breaks a constraint,
while the share of checks passed still orders the broken ones for policy-gradient rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.credit import CreditRule, CreditTurn

CONSISTENCY = "consistency"
CREATIVITY = "creativity"
CREATIVITY_WEIGHT = 0.25


def writer_credits(turns: Sequence[CreditTurn], role: str) -> dict[str, float]:
    credits = {}
    for turn in turns:
        if not (turn.selected and turn.seat == role and CONSISTENCY in turn.rewards):
            continue
        consistency = turn.rewards[CONSISTENCY]
        credits[turn.turn_id] = (1.0 + CREATIVITY_WEIGHT * turn.rewards.get(CREATIVITY, 0.0) if consistency == 1.0
                                 else consistency / 2)
    return credits


WRITER_CREDIT = CreditRule(writer_credits)
