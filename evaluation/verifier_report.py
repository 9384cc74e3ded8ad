"""How often a trained verifier agrees with the rules judge on held-out answers, per difficulty.

The answers are the logged turns of one role, served by a model (never a scripted bot's), in
succeeded episodes of one game and task split (``heldout`` by default: the split no training
row is built from), that the game checked against the ground truth: their ``correct`` reward
is the rules judge's judgment (of several such events on one turn, the latest). The trained
verifier scores each answer as its own prompt messages followed by the answer (as its training
rows were scored) and calls it correct when the score is above its threshold.

For each difficulty level, and for all answers together:

- ``n``, and how many the rules judge found ``correct`` and ``incorrect``;
- ``accuracy``: the share of answers on which the two agree (Wilson 95% interval);
- ``accepted``: the share of the correct answers the trained verifier calls correct, and
  ``rejected``: the share of the incorrect ones it calls incorrect (each Wilson);
- ``balanced_accuracy``: the mean of those two (MOVER interval): 0.5 for a verifier that calls
  everything correct, or everything incorrect, whatever the mix of answers, where plain
  accuracy would reward saying whatever the majority is (undefined when a level lacks a class).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import Engine

from graphs.credit import CORRECT
from graphs.metrics.stats import Estimate, mean_of_proportions, wilson
from storage.evaluation_rows import scored_answers

ALL = "all"
"""The row of all answers together."""
NO_DIFFICULTY = "none"
"""The level of answers whose task has no difficulty."""


class Verifier(Protocol):
    """What the report needs of a trained verifier (``graphs.policies.reward_model.RewardModel``)."""

    name: str
    threshold: float

    def score(self, conversations: Sequence[Sequence[dict[str, str]]]) -> list[float]: ...


class NoAnswersError(ValueError):
    """No answer to measure the verifier on."""


@dataclass(frozen=True)
class LevelAgreement:
    """The verifier against the rules judge on the answers of one difficulty level (or ``all``)."""

    difficulty: str
    n: int
    correct: int
    """answers the rules judge found correct"""
    incorrect: int
    accuracy: Estimate
    accepted: Estimate
    rejected: Estimate
    balanced_accuracy: Estimate

    def to_dict(self) -> dict[str, Any]:
        return {
            "difficulty": self.difficulty, "n": self.n, "correct": self.correct, "incorrect": self.incorrect,
            **{name: getattr(self, name).to_dict() for name in ("accuracy", "accepted", "rejected",
                                                                 "balanced_accuracy")},
        }


@dataclass(frozen=True)
class VerifierReport:
    verifier: str
    threshold: float
    game: str
    role: str
    split: str
    levels: list[LevelAgreement]
    """one per difficulty level in natural order (L2 before L10), then ``all``"""


@dataclass(frozen=True)
class _Answer:
    difficulty: str
    conversation: list[dict[str, str]]
    correct: bool


def verifier_report(
    engine: Engine, verifier: Verifier, *, game: str, role: str, split: str = "heldout", limit: int | None = None
) -> VerifierReport:
    """Score ``role``'s checked answers in ``game``'s ``split`` episodes (the first ``limit``, in
    the order the episodes started) and compare with the rules judge; NoAnswersError if none."""
    answers = checked_answers(engine, game=game, role=role, split=split, limit=limit)
    if not answers:
        raise NoAnswersError(
            f"no answer of {role!r} in succeeded {game} episodes of split {split!r} was checked against a ground "
            f"truth, so there is nothing to compare the verifier with. Play held-out tasks first, e.g. `sparring "
            f"eval --game {game} -n 200` (split heldout), or choose the role that answers the tasks"
        )
    scores = verifier.score([answer.conversation for answer in answers])
    says = [score > verifier.threshold for score in scores]
    levels = sorted({answer.difficulty for answer in answers}, key=_natural)
    rows = [_agreement(level, [(a.correct, s) for a, s in zip(answers, says, strict=True) if a.difficulty == level])
            for level in levels]
    rows.append(_agreement(ALL, [(a.correct, s) for a, s in zip(answers, says, strict=True)]))
    return VerifierReport(verifier.name, verifier.threshold, game, role, split, rows)


def checked_answers(engine: Engine, *, game: str, role: str, split: str, limit: int | None) -> list[_Answer]:
    """The role's model answers with a ``correct`` reward in the game's succeeded episodes of ``split``."""
    answers: dict[str, _Answer] = {}
    for row in scored_answers(engine, game=game, split=split, seat=role, reward=CORRECT):
        if row.turn_id not in answers and limit is not None and len(answers) >= limit:
            break
        conversation = [*row.messages, {"role": "assistant", "content": row.response}]
        # of several events on one turn, the latest wins
        answers[row.turn_id] = _Answer(row.difficulty or NO_DIFFICULTY, conversation, row.value >= 0.5)
    return list(answers.values())


def _agreement(difficulty: str, judged: list[tuple[bool, bool]]) -> LevelAgreement:
    """``judged``: (the rules judge's verdict, the trained verifier's) for each answer."""
    correct = [says for truth, says in judged if truth]
    incorrect = [says for truth, says in judged if not truth]
    accepted, rejected = wilson(sum(correct), len(correct)), wilson(len(incorrect) - sum(incorrect), len(incorrect))
    return LevelAgreement(
        difficulty=difficulty, n=len(judged), correct=len(correct), incorrect=len(incorrect),
        accuracy=wilson(sum(truth == says for truth, says in judged), len(judged)),
        accepted=accepted, rejected=rejected, balanced_accuracy=mean_of_proportions(accepted, rejected),
    )


def _natural(level: str) -> tuple[Any, ...]:
    """L2 before L10; the no-difficulty level last."""
    return (level == NO_DIFFICULTY, *((0, int(part)) if part.isdigit() else (1, part)
                                      for part in re.split(r"(\d+)", level)))
