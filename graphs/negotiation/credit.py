"""The reward names of negotiation and the proposer's credit rule.

Each negotiator move gets ``valid`` and ``coherent`` (1/0, by the rules in ``rules.py``). Each
negotiator's last move gets the episode's outcome for it: ``value_share`` (what its share is
worth to it over what the whole pool is worth to it; 0 without a deal), ``agreement`` (1/0),
``fairness`` (the deal's Nash product over the best achievable), ``pareto_share`` (the deal's
joint value over the best joint value) and ``coherence`` (the share of its moves that were
coherent); the proposer's also ``judge_coherence`` when a judge model scored it.

The proposer's credit, for each of its moves: the episode's ``value_share`` minus 1 when that
move was not coherent. Every move shares the outcome it led to, and an invalid or
self-contradicting move is pushed down on its own. It is the gate metric's quantity, so what
the builders reward is what the gate checks; fairness and coherence as judged stay reports.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.credit import CreditRule, CreditTurn

VALID = "valid"
COHERENT = "coherent"
VALUE_SHARE = "value_share"
AGREEMENT = "agreement"
FAIRNESS = "fairness"
PARETO_SHARE = "pareto_share"
COHERENCE = "coherence"
JUDGE_COHERENCE = "judge_coherence"


def negotiator_credits(turns: Sequence[CreditTurn], role: str) -> dict[str, float]:
    own = [t for t in turns if t.seat == role]
    share = next((t.rewards[VALUE_SHARE] for t in reversed(own) if VALUE_SHARE in t.rewards), None)
    if share is None:
        return {}
    return {t.turn_id: share - (1.0 - t.rewards[COHERENT]) for t in own if t.selected and COHERENT in t.rewards}


NEGOTIATOR_CREDIT = CreditRule(negotiator_credits)
