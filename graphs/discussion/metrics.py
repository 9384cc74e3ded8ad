"""The metrics of the discussion game, computed from the store (the agents' turns, their
parsed answers and ``correct`` rewards; only episodes whose task has a ground truth).

- ``round-R``: the share of right answers in round R (all agents);
- ``AGENT:round-R`` and ``AGENT:final`` (its last round: the agent's gate): each agent's;
- ``final_majority``: the majority of the final answers (ties to the later agent:
  ``graphs.math_reflection.majority``);
- ``discussion_gain``: final round minus first round, paired by task
  (``graphs.metrics.stats.paired``: the mean difference with a paired bootstrap 95% interval),
  which says whether discussing helped;
- ``wrong->right`` and ``right->wrong``: the share of agents whose final answer is right
  where their first was wrong, and the reverse.

Each is a mean over tasks of per-task outcomes, with its sample size and 95% interval
(``graphs.metrics.run_metrics``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine

from graphs.credit import CORRECT
from graphs.discussion.state import AGENTS
from graphs.judges.majority import majority_correct
from graphs.metrics.run_metrics import RunMetrics, per_task_means, task_means
from graphs.metrics.stats import paired
from storage.metric_rows import turn_rewards


@dataclass
class _Episode:
    task_id: str
    rounds: dict[int, dict[str, tuple[str | None, float | None]]] = field(default_factory=dict)
    """round -> agent seat -> (parsed answer, correct 1/0 or None without truth), seats in order"""

    def judged(self) -> bool:
        return bool(self.rounds) and all(c is not None for r in self.rounds.values() for _, c in r.values())

    def accuracy(self, round_: int) -> float:
        answers = self.rounds[round_].values()
        return sum(c for _, c in answers) / len(answers)

    @property
    def first(self) -> dict[str, tuple[str | None, float | None]]:
        return self.rounds[min(self.rounds)]

    @property
    def final(self) -> dict[str, tuple[str | None, float | None]]:
        return self.rounds[max(self.rounds)]


def _episodes(engine: Engine, run_id: str) -> list[_Episode]:
    found: dict[str, _Episode] = {}
    for turn in turn_rewards(engine, run_id, names=(CORRECT,), seats=AGENTS):
        episode = found.setdefault(turn.episode_id, _Episode(turn.task_id))
        episode.rounds.setdefault(turn.round, {})[turn.seat] = (turn.parsed_value, turn.value)
    return [e for e in found.values() if e.judged()]


def _flips(before: float, after: float) -> Callable[[_Episode], float]:
    """The share of an episode's agents whose first answer scored ``before`` and final ``after``."""
    def share(e: _Episode) -> float:
        return sum(e.first[s][1] == before and e.final[s][1] == after for s in e.final) / len(e.final)
    return share


def discussion_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = _episodes(engine, run_id)
    pairs: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for e in episodes:
        for round_, answers in sorted(e.rounds.items()):
            pairs[f"round-{round_ + 1}"].append((e.task_id, e.accuracy(round_)))
            for seat, (_, correct) in answers.items():
                pairs[f"{seat}:round-{round_ + 1}"].append((e.task_id, correct))
        for seat, (_, correct) in e.final.items():
            pairs[f"{seat}:final"].append((e.task_id, correct))
        pairs["final_majority"].append((e.task_id, majority_correct(list(e.final.values()))))
        for name, flip in (("wrong->right", _flips(0.0, 1.0)), ("right->wrong", _flips(1.0, 0.0))):
            pairs[name].append((e.task_id, flip(e)))
    result = task_means({name: per_task_means(values) for name, values in sorted(pairs.items())})
    if episodes:
        final = per_task_means((e.task_id, e.accuracy(max(e.rounds))) for e in episodes)
        first = per_task_means((e.task_id, e.accuracy(min(e.rounds))) for e in episodes)
        result.metrics["discussion_gain"] = paired(final, first).difference
        result.per_task["discussion_gain"] = {task: final[task] - first[task] for task in final}
    return result
