"""Game metrics computed from the store (never from in-memory results), per run or filter.

math-reflection: pass@turn-1 (the actor's first answer is correct), pass@final-turn (its last
answer), majority@N (the most frequent parsed answer over the episode, ties to the latest)
and the critic's verdict accuracy. debate: debater_a's win, loss and tie rates.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from sqlalchemy import Engine, select

from storage.models import Base
from storage.queries import in_run

_T = Base.metadata.tables


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _reward_rows(engine: Engine, run_id: str, seat: str, name: str) -> list[Any]:
    """(episode_id, turn idx, parsed_value, reward value) of one seat's rewards in a run,
    succeeded episodes only, ordered by turn."""
    episodes, turns, rewards = _T["episodes"], _T["turns"], _T["rewards"]
    query = (
        select(episodes.c.id, turns.c.idx, turns.c.parsed_value, rewards.c.value)
        .join(turns, turns.c.episode_id == episodes.c.id)
        .join(rewards, rewards.c.turn_id == turns.c.id)
        .where(
            in_run(run_id),
            episodes.c.status == "succeeded",
            turns.c.seat == seat,
            rewards.c.name == name,
        )
        .order_by(episodes.c.id, turns.c.idx)
    )
    with engine.connect() as conn:
        return list(conn.execute(query))


def reflection_metrics(engine: Engine, run_id: str) -> dict[str, float | None]:
    by_episode: dict[str, list[tuple[str | None, float]]] = defaultdict(list)
    for episode_id, _idx, parsed, value in _reward_rows(engine, run_id, "actor", "correct"):
        by_episode[episode_id].append((parsed, value))
    first, final, majority = [], [], []
    for answers in by_episode.values():
        first.append(answers[0][1])
        final.append(answers[-1][1])
        majority.append(_majority_correct(answers))
    verdicts = [row[3] for row in _reward_rows(engine, run_id, "critic", "verdict_correct")]
    return {
        "pass@turn-1": _mean(first),
        "pass@final-turn": _mean(final),
        "majority@N": _mean(majority),
        "critic_accuracy": _mean(verdicts),
    }


def _majority_correct(answers: list[tuple[str | None, float]]) -> float:
    """Correctness of the most frequent parsed answer; ties go to the latest answer."""
    parsed = [(p, v) for p, v in answers if p is not None]
    if not parsed:
        return 0.0
    counts = Counter(p for p, _ in parsed)
    top = max(counts.values())
    for answer, value in reversed(parsed):
        if counts[answer] == top:
            return value
    return 0.0


def debate_metrics(engine: Engine, run_id: str) -> dict[str, float | None]:
    episodes, judgments = _T["episodes"], _T["judgments"]
    query = (
        select(judgments.c.winner_seat)
        .join(episodes, episodes.c.id == judgments.c.episode_id)
        .where(in_run(run_id), episodes.c.status == "succeeded")
    )
    with engine.connect() as conn:
        winners = [row[0] for row in conn.execute(query)]
    return {
        "debater_a_win_rate": _mean([w == "debater_a" for w in winners]),
        "debater_b_win_rate": _mean([w == "debater_b" for w in winners]),
        "tie_rate": _mean([w is None for w in winners]),
    }


def run_metrics(engine: Engine, run_id: str) -> dict[str, float | None]:
    """The metrics of a run's game (empty for a game without metrics here); the run of a
    `sparring play --workers N` command covers the episodes of all its workers."""
    runs = _T["runs"]
    with engine.connect() as conn:
        game = conn.execute(select(runs.c.game).where(runs.c.id == run_id)).scalar_one_or_none()
    if game == "math-reflection":
        return reflection_metrics(engine, run_id)
    if game == "debate":
        return debate_metrics(engine, run_id)
    return {}
