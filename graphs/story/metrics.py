"""The metrics of story, from the store's rewards and judgments (succeeded episodes only).

- ``consistency_rate``: the share of the writer's passages, every candidate, that keep every
  constraint (``consistency`` reward 1.0); Wilson interval over passages, linearised per task.
  The writer's gate metric.
- ``violations_per_episode``: constraint violations in the writer's kept passages of an episode
  (ending and cast included), mean per task, bootstrap interval. A count, not a share: the
  eval table prints it x100 with a % sign (1.5 violations: "150.0%"); JSON gives the number.
- ``violation_free_rate``: the share of episodes whose kept writer passages break nothing.
- ``ending_reached_rate``: the share of episodes whose last kept writer passage reaches the ending.
- ``co_writer_consistency_rate``: as consistency_rate, for the co-writer (a check on the judge:
  ``scripted:story-contradiction`` must score 0 and ``scripted:story-template`` 1).
- ``creativity_win_rate``: the judge model's preference of the writer's passages over the
  co-writer's (1 win, 0 loss), mean per task; only episodes whose judge seat had a model.
- ``creativity_proxy_win_rate``: the same by the rule proxy (more new words per passage; 0.5 a
  tie). A proxy, not a judgment of quality.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import Engine

from graphs.metrics.run_metrics import RunMetrics, per_task_means, ratio, task_means
from graphs.story.credit import CONSISTENCY
from graphs.story.prompts import CREATIVITY, CREATIVITY_PROXY
from graphs.story.state import CO_WRITER, WRITER
from storage.metric_rows import run_judgments, turn_rewards


@dataclass
class _Episode:
    task_id: str
    violations: int = 0
    ending: bool | None = None
    creativity: float | None = None
    proxy: float | None = None


@dataclass
class _Passages:
    """One task's passages of one seat: how many, how many kept every constraint."""

    total: int = 0
    consistent: int = 0


@dataclass
class _Read:
    episodes: dict[str, _Episode] = field(default_factory=dict)
    passages: dict[str, dict[str, _Passages]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(_Passages)))
    """seat -> task -> counts"""


def story_metrics(engine: Engine, run_id: str) -> RunMetrics:
    read = _read(engine, run_id)
    metrics = RunMetrics()
    for name, seat in (("consistency_rate", WRITER), ("co_writer_consistency_rate", CO_WRITER)):
        estimate, per_task = ratio(read.passages[seat], lambda p: p.consistent, lambda p: p.total)
        metrics = metrics.merged(RunMetrics({name: estimate}, {name: per_task}))
    episodes = list(read.episodes.values())
    outcomes = {
        "violations_per_episode": [(e.task_id, float(e.violations)) for e in episodes],
        "violation_free_rate": [(e.task_id, float(e.violations == 0)) for e in episodes],
        "ending_reached_rate": [(e.task_id, float(e.ending)) for e in episodes if e.ending is not None],
        "creativity_win_rate": [(e.task_id, e.creativity) for e in episodes if e.creativity is not None],
        "creativity_proxy_win_rate": [(e.task_id, e.proxy) for e in episodes if e.proxy is not None],
    }
    return metrics.merged(task_means({name: per_task_means(pairs) for name, pairs in outcomes.items()}))


def _read(engine: Engine, run_id: str) -> _Read:
    read = _Read()
    for passage in turn_rewards(engine, run_id, names=(CONSISTENCY,), unrewarded=False):
        episode = read.episodes.setdefault(passage.episode_id, _Episode(passage.task_id))
        counts = read.passages[passage.seat][passage.task_id]
        counts.total += 1
        counts.consistent += passage.value == 1.0
        if passage.seat == WRITER and passage.info.get("kept"):
            episode.violations += len(passage.info.get("violations") or [])
            if passage.info.get("ending") is not None:
                episode.ending = bool(passage.info["ending"])
    for judgment in run_judgments(engine, run_id, rubrics=(CREATIVITY.name, CREATIVITY_PROXY)):
        episode = read.episodes.get(judgment.episode_id)
        if episode is None:
            continue
        if judgment.rubric == CREATIVITY.name and {judgment.winner_seat, judgment.loser_seat} == {WRITER, CO_WRITER}:
            episode.creativity = float(judgment.winner_seat == WRITER)
        elif judgment.rubric == CREATIVITY_PROXY and judgment.scored_seat == WRITER:
            episode.proxy = judgment.score
    return read
