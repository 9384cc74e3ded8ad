"""Game metrics computed from the store (never from in-memory results), per run.

Every metric is an ``Estimate`` (value, n, 95% interval) and comes with its per-task
outcomes (task id -> float), so two runs on the same tasks can be compared paired
(``evaluation.stats.paired``). Only succeeded episodes count; a task played several times
gets the mean of its episodes.

math-reflection, on the actor's answers checked against the truth (reward ``correct``):
pass@turn-1 (first answer right), pass@final-turn (last answer), majority@N (the most frequent
parsed answer; ties go to the latest), pass@any-turn, refinement_gain (final minus first, per
task) and the flips wrong->right and right->wrong (share of tasks). On the critic's verdicts
(its turn's ``parsed_value``: "correct", "incorrect" or None when unreadable, which only a
backend that cannot constrain the verdict line leaves), each checked
against the correctness of the answer it reviewed (the actor's latest answer before it; read
from the actor's reward, so it does not matter whether an unreadable verdict has a reward row):
critic_balanced_accuracy (mean of the recall on right answers and on wrong answers; an
unreadable verdict is a miss in both; undefined unless both kinds of answer were reviewed),
critic_precision_incorrect and critic_recall_incorrect (of the verdict "incorrect"),
critic_unparsed_rate, and critic_accuracy (raw share of right verdicts: kept for reference,
never used by a gate, since a critic that always says "incorrect" scores high on a weak actor).

debate: debater_a_win_rate, debater_b_win_rate, tie_rate (per task: 1 when it happened).

Ratios over turns (precision, recalls, unparsed rate, raw accuracy) get a Wilson interval
with n = turns; the balanced accuracy, the mean of two recalls, the MOVER interval built from
theirs (``stats.mean_of_proportions``: a bootstrap's would collapse to a point for a critic
that is always right on a small sample). Their per-task
outcomes are the tasks' linearised contributions (delta method): for R = sum(num) / sum(den)
over tasks, task t contributes R + (num_t - R den_t) / mean(den), so the mean over tasks is R
exactly and a paired difference of two runs has the ratio's own uncertainty.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Engine, select

from evaluation.stats import Estimate, mean_estimate, mean_of_proportions, ratio_estimate
from storage.models import Base
from storage.queries import in_run

_T = Base.metadata.tables

@dataclass(frozen=True)
class RunMetrics:
    metrics: dict[str, Estimate] = field(default_factory=dict)
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)
    """metric name -> task id -> the task's outcome (mean over tasks = the metric)"""

    def values(self) -> dict[str, float | None]:
        """The bare values, rounded, for summaries that show no intervals."""
        return {name: None if e.value is None else round(e.value, 4) for name, e in self.metrics.items()}


@dataclass
class _Episode:
    task_id: str
    answers: list[tuple[str | None, float | None]] = field(default_factory=list)
    """the actor's (parsed answer, correct 1/0 or None without truth), in turn order"""
    verdicts: list[tuple[str | None, bool | None]] = field(default_factory=list)
    """the critic's (verdict, whether the answer it reviewed was right), in turn order"""


def _reflection_episodes(engine: Engine, run_id: str) -> list[_Episode]:
    episodes, turns, rewards = _T["episodes"], _T["turns"], _T["rewards"]
    query = (
        select(episodes.c.id, episodes.c.task_id, turns.c.seat, turns.c.parsed_value, rewards.c.value)
        .join(turns, turns.c.episode_id == episodes.c.id)
        .outerjoin(rewards, (rewards.c.turn_id == turns.c.id) & (rewards.c.name == "correct"))
        .where(in_run(run_id), episodes.c.status == "succeeded", turns.c.seat.in_(("actor", "critic")))
        .order_by(episodes.c.id, turns.c.idx)
    )
    found: dict[str, _Episode] = {}
    with engine.connect() as conn:
        for episode_id, task_id, seat, parsed, correct in conn.execute(query):
            episode = found.setdefault(episode_id, _Episode(task_id))
            if seat == "actor":
                episode.answers.append((parsed, correct))
            else:
                reviewed = episode.answers[-1][1] if episode.answers else None
                episode.verdicts.append((parsed, None if reviewed is None else reviewed == 1.0))
    return list(found.values())


def majority_correct(answers: Sequence[tuple[str | None, float | None]]) -> float:
    """Correctness of the most frequent parsed answer; ties go to the latest answer."""
    parsed = [(p, v or 0.0) for p, v in answers if p is not None]
    if not parsed:
        return 0.0
    counts = Counter(p for p, _ in parsed)
    top = max(counts.values())
    return next(value for answer, value in reversed(parsed) if counts[answer] == top)


def _per_task(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """task id -> mean of its episodes' values."""
    sums: dict[str, list[float]] = defaultdict(list)
    for task, value in pairs:
        sums[task].append(value)
    return {task: sum(v) / len(v) for task, v in sums.items()}


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
    per_task = {name: _per_task((e.task_id, outcome(e)) for e in judged) for name, outcome in outcomes.items()}
    return RunMetrics({name: mean_estimate(list(values.values())) for name, values in per_task.items()}, per_task)


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


def _ratio(tasks: Mapping[str, _CriticCounts], num: Callable[[_CriticCounts], int],
           den: Callable[[_CriticCounts], int]) -> tuple[Estimate, dict[str, float]]:
    """The ratio sum(num) / sum(den) (Wilson over the counted events) and each task's
    linearised contribution (see the module docstring); empty when nothing was counted."""
    total_num, total_den = sum(num(c) for c in tasks.values()), sum(den(c) for c in tasks.values())
    if total_den == 0:
        return Estimate(None, 0), {}
    ratio, mean_den = total_num / total_den, total_den / len(tasks)
    return ratio_estimate(total_num, total_den), {
        task: ratio + (num(c) - ratio * den(c)) / mean_den for task, c in tasks.items()
    }


def _critic_metrics(episodes: list[_Episode]) -> RunMetrics:
    tasks = _critic_counts(episodes)
    if not tasks:
        return RunMetrics()
    ratios = {
        "critic_recall_correct": (lambda c: c.right_hits, lambda c: c.right),
        "critic_recall_incorrect": (lambda c: c.wrong_hits, lambda c: c.wrong),
        "critic_precision_incorrect": (lambda c: c.wrong_hits, lambda c: c.flagged),
        "critic_unparsed_rate": (lambda c: c.unparsed, lambda c: c.reviews),
        "critic_accuracy": (lambda c: c.right_hits + c.wrong_hits, lambda c: c.right + c.wrong),
    }
    result = RunMetrics()
    for name, (num, den) in ratios.items():
        result.metrics[name], result.per_task[name] = _ratio(tasks, num, den)
    balanced = mean_of_proportions(result.metrics["critic_recall_correct"], result.metrics["critic_recall_incorrect"])
    right, wrong = result.per_task["critic_recall_correct"], result.per_task["critic_recall_incorrect"]
    result.metrics["critic_balanced_accuracy"] = balanced
    result.per_task["critic_balanced_accuracy"] = (
        {task: (right[task] + wrong[task]) / 2 for task in tasks} if balanced.value is not None else {}
    )
    return result


def reflection_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = _reflection_episodes(engine, run_id)
    actor, critic = _actor_metrics(episodes), _critic_metrics(episodes)
    return RunMetrics({**actor.metrics, **critic.metrics}, {**actor.per_task, **critic.per_task})


def debate_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes, judgments = _T["episodes"], _T["judgments"]
    query = (
        select(episodes.c.task_id, judgments.c.winner_seat)
        .join(episodes, episodes.c.id == judgments.c.episode_id)
        .where(in_run(run_id), episodes.c.status == "succeeded")
    )
    with engine.connect() as conn:
        winners = list(conn.execute(query))
    outcomes = {"debater_a_win_rate": "debater_a", "debater_b_win_rate": "debater_b", "tie_rate": None}
    per_task = {name: _per_task((task, float(winner == seat)) for task, winner in winners)
                for name, seat in outcomes.items()}
    return RunMetrics({name: mean_estimate(list(values.values())) for name, values in per_task.items()}, per_task)


def run_estimates(engine: Engine, run_id: str) -> RunMetrics:
    """The metrics of a run's game (empty for a game without metrics here); the run of a
    `sparring play --workers N` command covers the episodes of all its workers."""
    runs = _T["runs"]
    with engine.connect() as conn:
        game = conn.execute(select(runs.c.game).where(runs.c.id == run_id)).scalar_one_or_none()
    if game == "math-reflection":
        return reflection_metrics(engine, run_id)
    if game == "debate":
        return debate_metrics(engine, run_id)
    return RunMetrics()


def run_metrics(engine: Engine, run_id: str) -> dict[str, float | None]:
    """The bare values of ``run_estimates`` (what a play summary shows)."""
    return run_estimates(engine, run_id).values()
