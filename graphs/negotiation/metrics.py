"""The metrics of negotiation, from the store's rewards (succeeded episodes of the run).

Per episode, then the mean over a task's episodes, then over tasks (bootstrap interval, or
Wilson for 0/1 outcomes): agreement_rate, own_value_share (the proposer's value share, 0
without a deal), counterpart_value_share, fairness (Nash product over the best), pareto_share,
coherence (the share of the proposer's moves that were coherent) and, when a judge model
scored it, judge_coherence. invalid_move_rate is a ratio over the proposer's moves (Wilson,
n = moves; per-task outcomes linearised, ``evaluation.run_metrics``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import Engine, select

from evaluation.run_metrics import RunMetrics, per_task_means, ratio, task_means
from graphs.negotiation import credit
from storage.models import Base
from storage.queries import in_run

_T = Base.metadata.tables

EPISODE_METRICS = {
    "agreement_rate": ("proposer", credit.AGREEMENT),
    "own_value_share": ("proposer", credit.VALUE_SHARE),
    "counterpart_value_share": ("counterpart", credit.VALUE_SHARE),
    "fairness": ("proposer", credit.FAIRNESS),
    "pareto_share": ("proposer", credit.PARETO_SHARE),
    "coherence": ("proposer", credit.COHERENCE),
    "judge_coherence": ("proposer", credit.JUDGE_COHERENCE),
}


@dataclass
class _Episode:
    task_id: str
    outcome: dict[tuple[str, str], float] = field(default_factory=dict)
    """(seat, reward name) -> value, for the end-of-episode rewards"""
    proposer_moves: int = 0
    proposer_invalid: int = 0


@dataclass(frozen=True)
class _Moves:
    invalid: int = 0
    moves: int = 0


def _episodes(engine: Engine, run_id: str) -> list[_Episode]:
    episodes, rewards = _T["episodes"], _T["rewards"]
    query = (
        select(episodes.c.id, episodes.c.task_id, rewards.c.seat, rewards.c.name, rewards.c.value)
        .join(rewards, rewards.c.episode_id == episodes.c.id)
        .where(in_run(run_id), episodes.c.status == "succeeded")
        .order_by(episodes.c.id, rewards.c.id)
    )
    found: dict[str, _Episode] = {}
    with engine.connect() as conn:
        for episode_id, task_id, seat, name, value in conn.execute(query):
            episode = found.setdefault(episode_id, _Episode(task_id))
            if name == credit.VALID and seat == "proposer":
                episode.proposer_moves += 1
                episode.proposer_invalid += value < 0.5
            elif name != credit.COHERENT:
                episode.outcome[(seat, name)] = value
    return list(found.values())


def negotiation_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = _episodes(engine, run_id)
    per_task = {
        name: per_task_means((e.task_id, e.outcome[key]) for e in episodes if key in e.outcome)
        for name, key in EPISODE_METRICS.items()
    }
    result = task_means({name: values for name, values in per_task.items() if values or name != "judge_coherence"})
    moves: dict[str, _Moves] = defaultdict(_Moves)
    for e in episodes:
        before = moves[e.task_id]
        moves[e.task_id] = _Moves(before.invalid + e.proposer_invalid, before.moves + e.proposer_moves)
    result.metrics["invalid_move_rate"], result.per_task["invalid_move_rate"] = ratio(
        moves, lambda m: m.invalid, lambda m: m.moves)
    return result
