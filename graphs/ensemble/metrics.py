"""The metrics of the ensemble game, computed from the store.

From the solver's turns (their parsed answers) and their ``correct`` rewards (whose info names
the turn's variant): ``accuracy:VARIANT`` for each variant that played, ``solver_accuracy``
(every answer of every variant: the learner seat's gate), ``vote_accuracy`` (the majority of
the agents' parsed answers, ties to the later agent: ``graphs.math_reflection.majority``),
``agreement`` (the share of agents whose answer is the majority's; an unparsed answer does
not agree) and ``unanimous`` (every agent gave the same parsed answer). From the judge's
``pick_correct`` rewards, where a judge model picked: ``judge_accuracy``.

Each is a mean over tasks of per-task outcomes (a task played several times gets the mean of
its episodes), with its sample size and 95% interval (``graphs.metrics.run_metrics``). Accuracies
count only episodes whose task has a ground truth; agreement counts every episode.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import Engine

from graphs.credit import CORRECT
from graphs.ensemble.state import PICK_CORRECT
from graphs.judges.majority import majority_correct, majority_index
from graphs.metrics.run_metrics import RunMetrics, per_task_means, task_means
from storage.metric_rows import turn_rewards


@dataclass
class _Episode:
    task_id: str
    answers: list[tuple[str | None, float | None, str | None]] = field(default_factory=list)
    """the agents' (parsed answer, correct 1/0 or None without truth, variant), in agent order"""
    pick_correct: float | None = None


def _episodes(engine: Engine, run_id: str) -> list[_Episode]:
    found: dict[str, _Episode] = {}
    for turn in turn_rewards(engine, run_id, names=(CORRECT, PICK_CORRECT), seats=("solver", "judge")):
        episode = found.setdefault(turn.episode_id, _Episode(turn.task_id))
        if turn.seat == "solver":
            episode.answers.append((turn.parsed_value, turn.value, turn.info.get("variant")))
        else:
            episode.pick_correct = turn.value
    return list(found.values())


def _agreement(answers: list[tuple[str | None, float | None, str | None]]) -> float:
    parsed = [value for value, _, _ in answers]
    index = majority_index(parsed)
    return 0.0 if index is None else sum(value == parsed[index] for value in parsed) / len(parsed)


def ensemble_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = [e for e in _episodes(engine, run_id) if e.answers]
    judged = [e for e in episodes if all(correct is not None for _, correct, _ in e.answers)]
    by_variant: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for episode in judged:
        for _, correct, variant in episode.answers:
            by_variant[f"accuracy:{variant}"].append((episode.task_id, correct))
    outcomes = {
        **{name: per_task_means(pairs) for name, pairs in by_variant.items()},
        "solver_accuracy": per_task_means(
            (e.task_id, sum(c for _, c, _ in e.answers) / len(e.answers)) for e in judged),
        "vote_accuracy": per_task_means(
            (e.task_id, majority_correct([(value, correct) for value, correct, _ in e.answers])) for e in judged),
        "agreement": per_task_means((e.task_id, _agreement(e.answers)) for e in episodes),
        "unanimous": per_task_means(
            (e.task_id, float(_agreement(e.answers) == 1.0)) for e in episodes),
    }
    picked = [(e.task_id, e.pick_correct) for e in judged if e.pick_correct is not None]
    if picked:
        outcomes["judge_accuracy"] = per_task_means(picked)
    return task_means(outcomes)
