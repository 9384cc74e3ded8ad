"""The metrics of retrieval, from the store: the researcher's ``correct`` reward on each
episode's answer turn (whose info holds the answer, citations, gold and planted documents and
searches) and a model judge's ``judge_relevance`` where there was one.

Per task (mean of its episodes, Wilson or bootstrap interval over tasks):

- accuracy (the gate), accuracy_1hop, accuracy_2hop (by the question's number of gold documents)
- answer_format: the final reply was an ``Answer:`` line (else prose, or a search past the limit)
- relevance: share of the cited documents that are gold (0 when nothing is cited)
- fooled_rate: cited a distractor or stated a number only a distractor states, over the
  episodes where something was planted; distractor_seen: a search showed a distractor (same
  episodes)
- searched: made at least one search of its own (the opening search does not count);
  search_budget_used: its searches / ``--searches`` (searches per episode = this times
  ``--searches``: every figure here is a share)
- judge_relevance: a model judge's relevance score (0..1), where the judge seat had a model

Over citations (Wilson with n = citations, resp. gold documents): citation_precision (gold
citations / citations) and citation_recall (gold documents cited / gold documents).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select

from evaluation.run_metrics import RunMetrics, per_task_means, ratio, task_means
from graphs.credit import CORRECT
from graphs.retrieval.credit import JUDGE_RELEVANCE
from storage.models import Base
from storage.queries import in_run

_T = Base.metadata.tables


@dataclass
class _Episode:
    task_id: str
    correct: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    judged: float | None = None

    @property
    def cited(self) -> list[str]:
        return self.info.get("cited", [])

    @property
    def gold(self) -> list[str]:
        return self.info.get("gold", [])


def _episodes(engine: Engine, run_id: str) -> list[_Episode]:
    episodes, rewards = _T["episodes"], _T["rewards"]
    query = (
        select(episodes.c.id, episodes.c.task_id, rewards.c.name, rewards.c.value, rewards.c.info)
        .join(rewards, rewards.c.episode_id == episodes.c.id)
        .where(in_run(run_id), episodes.c.status == "succeeded", rewards.c.seat == "researcher",
               rewards.c.name.in_((CORRECT, JUDGE_RELEVANCE)))
        .order_by(episodes.c.id, rewards.c.id)
    )
    found: dict[str, _Episode] = {}
    with engine.connect() as conn:
        for episode_id, task_id, name, value, info in conn.execute(query):
            episode = found.setdefault(episode_id, _Episode(task_id))
            if name == CORRECT:
                episode.correct, episode.info = value, info or {}
            else:
                episode.judged = value
    return [e for e in found.values() if e.info]


def _relevance(e: _Episode) -> float:
    return sum(c in e.gold for c in e.cited) / len(e.cited) if e.cited else 0.0


def retrieval_metrics(engine: Engine, run_id: str) -> RunMetrics:
    episodes = _episodes(engine, run_id)
    outcomes: dict[str, tuple[Callable[[_Episode], bool], Callable[[_Episode], float]]] = {
        "accuracy": (lambda e: True, lambda e: e.correct),
        "accuracy_1hop": (lambda e: e.info.get("hops") == 1, lambda e: e.correct),
        "accuracy_2hop": (lambda e: e.info.get("hops") == 2, lambda e: e.correct),
        "answer_format": (lambda e: True, lambda e: float(e.info.get("answer_format", False))),
        "relevance": (lambda e: True, _relevance),
        "fooled_rate": (lambda e: bool(e.info.get("planted")), lambda e: float(e.info.get("fooled", False))),
        "distractor_seen": (lambda e: bool(e.info.get("planted")),
                            lambda e: float(e.info.get("distractor_seen", False))),
        "searched": (lambda e: True, lambda e: float(e.info.get("searches", 0) > 0)),
        "search_budget_used": (lambda e: e.info.get("search_limit", 0) > 0,
                               lambda e: e.info.get("searches", 0) / e.info["search_limit"]),
        "judge_relevance": (lambda e: e.judged is not None, lambda e: e.judged or 0.0),
    }
    result = task_means({name: per_task_means((e.task_id, value(e)) for e in episodes if applies(e))
                         for name, (applies, value) in outcomes.items()})
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for e in episodes:
        task = counts[e.task_id]
        hits = sum(c in e.gold for c in e.cited)
        task["gold_cited"] += hits
        task["cited"] += len(e.cited)
        task["gold_found"] += sum(g in e.cited for g in e.gold)
        task["gold"] += len(e.gold)
    for name, num, den in (("citation_precision", "gold_cited", "cited"),
                           ("citation_recall", "gold_found", "gold")):
        result.metrics[name], result.per_task[name] = ratio(counts, lambda c, k=num: c[k], lambda c, k=den: c[k])
    return result
