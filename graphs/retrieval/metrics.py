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
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine

from graphs.credit import CORRECT
from graphs.metrics.episode_rewards import episode_rewards
from graphs.metrics.run_metrics import RunMetrics, per_task_means, ratio, task_means
from graphs.retrieval.credit import JUDGE_RELEVANCE


@dataclass
class _Episode:
    task_id: str
    correct: float
    info: dict[str, Any]
    """the answer's details (its ``correct`` reward's info)"""
    judged: float | None

    @property
    def cited(self) -> list[str]:
        return self.info.get("cited", [])

    @property
    def gold(self) -> list[str]:
        return self.info.get("gold", [])


def _episodes(engine: Engine, run_id: str) -> list[_Episode]:
    """The episodes with an answer (the researcher's latest ``correct`` reward, its info)."""
    found = []
    for e in episode_rewards(engine, run_id, seat="researcher", names=(CORRECT, JUDGE_RELEVANCE)):
        answer = e.rewards.get(("researcher", CORRECT), [])
        judged = e.rewards.get(("researcher", JUDGE_RELEVANCE), [])
        if answer and answer[-1].info:
            found.append(_Episode(e.task_id, answer[-1].value, answer[-1].info, judged[-1].value if judged else None))
    return found


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
