"""The metrics of math-reflection, computed from the store (never from in-memory results).

On the actor's answers checked against the truth (reward ``correct``): pass@turn-1 (first
answer right), pass@final-turn (last answer), majority@N (the most frequent parsed answer;
ties go to the latest), pass@any-turn, refinement_gain (final minus first, per task) and the
flips wrong->right and right->wrong (share of tasks).

On the critic's verdicts (its turn's ``parsed_value``: "correct", "incorrect" or None when
unreadable, which only a backend that cannot constrain the verdict line leaves), each checked
against the correctness of the answer it reviewed (the actor's latest answer before it; read
from the actor's reward, so it does not matter whether an unreadable verdict has a reward row):
critic_balanced_accuracy (mean of the recall on right answers and on wrong answers; an
unreadable verdict is a miss in both; undefined unless both kinds of answer were reviewed),
critic_precision_incorrect and critic_recall_incorrect (of the verdict "incorrect"),
critic_unparsed_rate, and critic_accuracy (raw share of right verdicts: kept for reference,
never used by a gate, since a critic that always says "incorrect" scores high on a weak actor).

Ratios over turns (precision, recalls, unparsed rate, raw accuracy) get a Wilson interval
with n = turns and linearised per-task outcomes (``graphs.metrics.run_metrics``); the balanced
accuracy, the mean of two recalls, the MOVER interval built from theirs
(``stats.mean_of_proportions``: a bootstrap's would collapse to a point for a critic that is
always right on a small sample).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine

from graphs.credit import CORRECT
from graphs.judges.majority import majority_correct
from graphs.metrics.run_metrics import RunMetrics, per_task_means, ratio, task_means
from graphs.metrics.stats import mean_of_proportions
from storage.metric_rows import turn_rewards


@dataclass
class _Episode:
    task_id: str
    answers: list[tuple[str | None, float | None]] = field(default_factory=list)
    """the actor's (parsed answer, correct 1/0 or None without truth), in turn order"""
    verdicts: list[tuple[str | None, bool | None]] = field(default_factory=list)
    """the critic's (verdict, whether the answer it reviewed was right), in turn order"""


def _episodes(engine: Engine, run_id: str) -> list[_Episode]:
    found: dict[str, _Episode] = {}
    for turn in turn_rewards(engine, run_id, names=(CORRECT,), seats=("actor", "critic")):
        episode = found.setdefault(turn.episode_id, _Episode(turn.task_id))
        if turn.seat == "actor":
            episode.answers.append((turn.parsed_value, turn.value))
        else:
            reviewed = episode.answers[-1][1] if episode.answers else None
            episode.verdicts.append((turn.parsed_value, None if reviewed is None else reviewed == 1.0))
    return list(found.values())


def _actor_metrics(episodes: list[_Episode]) -> RunMetrics:
    judged = [e for e in episodes if e.answers and all(v is not None for _, v in e.answers)]
    outcomes: dict[str, Callable[[_Episode], float]] = {
        "pass@turn-1": lambda e: e.answers[0][1],
        "pass@final-turn": lambda e: e.answers[-1][1],
        "majority@N": lambda e: majority_correct(e.answers),
        "pass@any-turn": lambda e: max(v for _, v in e.answers),
        "refinement_gain": lambda e: e.answers[-1][1] - e.answers[0][1],
        "wrong->right": lambda e: float(e.answers[0][1] == 0.0 and e.answers[-1][1] == 1.0),
        "right->wrong": lambda e: float(e.answers[0][1] == 1.0 and e.answers[-1][1] == 0.0),
    }
    return task_means({name: per_task_means((e.task_id, outcome(e)) for e in judged)
                       for name, outcome in outcomes.items()})


@dataclass(frozen=True)
class _CriticCounts:
    """One task's critic verdicts on answers of known correctness."""

    right: int = 0
    """reviews of right answers"""
    right_hits: int = 0
    """... that said "correct\""""
    wrong: int = 0
    wrong_hits: int = 0
    """reviews of wrong answers that said "incorrect\""""
    flagged: int = 0
    """verdicts "incorrect\""""
    unparsed: int = 0
    reviews: int = 0
    """every critic turn (of known truth or not)"""


def _critic_counts(episodes: list[_Episode]) -> dict[str, _CriticCounts]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for episode in episodes:
        task = counts[episode.task_id]
        for verdict, right in episode.verdicts:
            task["reviews"] += 1
            task["unparsed"] += verdict is None
            if right is None:
                continue
            task["flagged"] += verdict == "incorrect"
            if right:
                task["right"] += 1
                task["right_hits"] += verdict == "correct"
            else:
                task["wrong"] += 1
                task["wrong_hits"] += verdict == "incorrect"
    return {task: _CriticCounts(**c) for task, c in counts.items() if c["reviews"]}


def _critic_metrics(episodes: list[_Episode]) -> RunMetrics:
    tasks = _critic_counts(episodes)
    if not tasks:
        return RunMetrics()
    ratios: dict[str, tuple[Callable[[_CriticCounts], int], Callable[[_CriticCounts], int]]] = {
        "critic_recall_correct": (lambda c: c.right_hits, lambda c: c.right),
        "critic_recall_incorrect": (lambda c: c.wrong_hits, lambda c: c.wrong),
        "critic_precision_incorrect": (lambda c: c.wrong_hits, lambda c: c.flagged),
        "critic_unparsed_rate": (lambda c: c.unparsed, lambda c: c.reviews),
        "critic_accuracy": (lambda c: c.right_hits + c.wrong_hits, lambda c: c.right + c.wrong),
    }
    result = RunMetrics()
    for name, (num, den) in ratios.items():
        result.metrics[name], result.per_task[name] = ratio(tasks, num, den)
    balanced = mean_of_proportions(result.metrics["critic_recall_correct"], result.metrics["critic_recall_incorrect"])
    right, wrong = result.per_task["critic_recall_correct"], result.per_task["critic_recall_incorrect"]
    result.metrics["critic_balanced_accuracy"] = balanced
    result.per_task["critic_balanced_accuracy"] = (
        {task: (right[task] + wrong[task]) / 2 for task in tasks} if balanced.value is not None else {}
    )
    return result


def reflection_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = _episodes(engine, run_id)
    return _actor_metrics(episodes).merged(_critic_metrics(episodes))
