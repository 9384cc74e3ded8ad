"""The researcher's credit: every one of its turns in an episode, searches included, gets the
episode's score, read from the answer turn's rewards:

    correct + 0.2 * relevance + 0.2 * cited_gold

so the searches that led to a right answer are trained along with it, a right answer that
cites its gold documents beats one that does not, and a wrong answer (at most 0.4) stays below
SFT's default threshold (0.5) however well it cites.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from graphs.credit import CORRECT, CreditRule, CreditTurn

CITATION_WEIGHT = 0.2
RELEVANCE, CITED_GOLD, JUDGE_RELEVANCE = "relevance", "cited_gold", "judge_relevance"
"""reward names beside ``correct`` (judge_relevance: a model judge's score, logged, not credited)"""


def episode_score(rewards: Mapping[str, float]) -> float:
    return rewards[CORRECT] + CITATION_WEIGHT * (rewards.get(RELEVANCE, 0.0) + rewards.get(CITED_GOLD, 0.0))


def researcher_credits(turns: Sequence[CreditTurn], role: str) -> dict[str, float]:
    answers = [t for t in turns if t.seat == role and CORRECT in t.rewards]
    if not answers:
        return {}
    score = episode_score(answers[-1].rewards)
    return {t.turn_id: score for t in turns if t.selected and t.seat == role}


RESEARCHER_CREDIT = CreditRule(researcher_credits)
