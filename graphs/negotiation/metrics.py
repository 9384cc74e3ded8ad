"""The metrics of negotiation, from the store's rewards (succeeded episodes of the run).

Per episode, then the mean over a task's episodes, then over tasks (bootstrap interval, or
Wilson for 0/1 outcomes): agreement_rate, own_value_share (the proposer's value share, 0
without a deal), counterpart_value_share, fairness (Nash product over the best), pareto_share,
coherence (the share of the proposer's moves that were coherent) and, when a judge model
scored it, judge_coherence. invalid_move_rate is a ratio over the proposer's moves (Wilson,
n = moves; per-task outcomes linearised, ``graphs.metrics.run_metrics``).
"""

from __future__ import annotations

from sqlalchemy import Engine

from graphs.metrics.episode_rewards import episode_rewards, invalid_move_rate
from graphs.metrics.run_metrics import RunMetrics, per_task_means, task_means
from graphs.negotiation import credit

EPISODE_METRICS = {
    "agreement_rate": ("proposer", credit.AGREEMENT),
    "own_value_share": ("proposer", credit.VALUE_SHARE),
    "counterpart_value_share": ("counterpart", credit.VALUE_SHARE),
    "fairness": ("proposer", credit.FAIRNESS),
    "pareto_share": ("proposer", credit.PARETO_SHARE),
    "coherence": ("proposer", credit.COHERENCE),
    "judge_coherence": ("proposer", credit.JUDGE_COHERENCE),
}


def negotiation_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = episode_rewards(engine, run_id)
    per_task = {
        name: per_task_means((e.task_id, e.value(*key)) for e in episodes if key in e.rewards)
        for name, key in EPISODE_METRICS.items()
    }
    result = task_means({name: values for name, values in per_task.items() if values or name != "judge_coherence"})
    result.metrics["invalid_move_rate"], result.per_task["invalid_move_rate"] = invalid_move_rate(
        episodes, "proposer", credit.VALID)
    return result
