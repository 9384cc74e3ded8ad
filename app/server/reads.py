"""What the viewer reads that storage.queries does not: runs, the training lineage (dataset
snapshot -> adapter version -> gate), evaluations, one task played by two policies, and the games
and seats the store logged (those of games the registry does not know included).

Plain dicts out, as storage.queries gives; every query is built with SQLAlchemy (parameterised).
"""

from __future__ import annotations

import difflib
from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, func, select

import storage.logged
from storage.models import AdapterVersion, DatasetSnapshot, Episode, Evaluation, Run, TrainingJob, Turn
from storage.queries import EpisodeFilter, count_episodes_by_status, get_episode, list_episodes

_RUNS, _AV, _DS, _JOBS, _EV = (t.__table__ for t in (Run, AdapterVersion, DatasetSnapshot, TrainingJob, Evaluation))
_E, _T = Episode.__table__, Turn.__table__


def list_runs(engine: Engine, limit: int = 100, *, game: str | None = None,
              status: str | None = None) -> list[dict[str, Any]]:
    """The newest runs (workers' runs included, each naming its parent), with their summaries
    (an evaluation run's summary holds its metrics); ``game`` and ``status`` keep those only."""
    stmt = select(*_RUNS.c).order_by(_RUNS.c.started_at.desc(), _RUNS.c.id.desc()).limit(limit)
    if game is not None:
        stmt = stmt.where(_RUNS.c.game == game)
    if status is not None:
        stmt = stmt.where(_RUNS.c.status == status)
    with engine.connect() as conn:
        return [row._asdict() for row in conn.execute(stmt)]


def get_run(engine: Engine, run_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(select(*_RUNS.c).where(_RUNS.c.id == run_id)).first()
    if row is None:
        raise KeyError(f"no run {run_id!r}; GET /api/runs lists them")
    return {**row._asdict(), "episodes_by_status": count_episodes_by_status(engine, run_id)}


def list_datasets(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [row._asdict() for row in conn.execute(select(*_DS.c).order_by(_DS.c.created_at.desc()))]


def list_evaluations(engine: Engine) -> list[dict[str, Any]]:
    names = _AV.alias("baseline")
    stmt = (
        select(*_EV.c, _AV.c.name.label("adapter"), names.c.name.label("baseline"))
        .join(_AV, _AV.c.id == _EV.c.adapter_version_id)
        .outerjoin(names, names.c.id == _EV.c.baseline_version_id)
        .order_by(_EV.c.created_at.desc())
    )
    with engine.connect() as conn:
        return [row._asdict() for row in conn.execute(stmt)]


def lineage(engine: Engine) -> list[dict[str, Any]]:
    """Every adapter version, newest first, with what made it: its parent, the dataset
    snapshot it was trained on (how many rows, from which episodes), its training job, and
    the gate figures it was promoted or rejected on."""
    parent = _AV.alias("parent")
    stmt = (
        select(*_AV.c, parent.c.name.label("parent"))
        .outerjoin(parent, parent.c.id == _AV.c.parent_id)
        .order_by(_AV.c.created_at.desc(), _AV.c.id.desc())
    )
    with engine.connect() as conn:
        versions = [row._asdict() for row in conn.execute(stmt)]
        snapshots = {row.id: row._asdict() for row in conn.execute(select(*_DS.c))}
        jobs = {row.adapter_version_id: row._asdict()
                for row in conn.execute(select(*_JOBS.c).where(_JOBS.c.adapter_version_id.is_not(None)))}
    for version in versions:
        version["dataset"] = snapshots.get(version["dataset_snapshot_id"])
        version["job"] = jobs.get(version["id"])
        version["gate"] = (version.get("eval") or {}).get("gate")
        version["training"] = (version.get("eval") or {}).get("training")
    return versions


def tasks_of(engine: Engine, a: str, b: str, limit: int = 200) -> list[dict[str, Any]]:
    """Tasks both policies played (among each one's latest ``limit`` episodes), with each
    side's latest reward: the places to compare them."""
    sides = [list_episodes(engine, EpisodeFilter(policy=p), limit=limit, count=False).items for p in (a, b)]
    latest = [{} for _ in sides]
    for i, episodes in enumerate(sides):
        for episode in episodes:  # newest first: keep the first seen
            latest[i].setdefault(episode["task_id"], episode)
    shared = [t for t in latest[0] if t in latest[1]]
    return [{"task_id": t, "a": latest[0][t], "b": latest[1][t]} for t in shared]


def compare(engine: Engine, task_id: str, a: str, b: str) -> dict[str, Any]:
    """The latest episode of ``task_id`` played by each policy, in full, and what changed:
    status, reward and final answer side by side, and a line diff of the last responses.
    ``note`` says so when the two episodes are of different games (None when they are not)."""
    episodes = []
    for policy in (a, b):
        page = list_episodes(engine, EpisodeFilter(task_id=task_id, policy=policy), limit=1, count=False)
        if not page.items:
            raise KeyError(f"no episode of task {task_id!r} played by {policy!r}")
        episodes.append(get_episode(engine, page.items[0]["id"]))
    left, right = episodes
    games = [left.get("game"), right.get("game")]
    note = (None if games[0] == games[1] else
            f"these are episodes of different games ({a}: {games[0]}, {b}: {games[1]}): the same task id names "
            "different tasks, so the two are not comparable turn by turn")
    changes = [
        {"what": key, "a": left.get(key), "b": right.get(key)}
        for key in ("status", "reward", "num_turns", "error_stage")
        if left.get(key) != right.get(key)
    ]
    answer = [(e.get("outcome") or {}).get("final_answer") for e in episodes]
    if answer[0] != answer[1]:
        changes.append({"what": "final_answer", "a": answer[0], "b": answer[1]})
    last = [(e["turns"][-1]["response"] if e["turns"] else "") for e in episodes]
    diff = list(difflib.unified_diff(last[0].splitlines(), last[1].splitlines(), a, b, lineterm=""))
    return {"task_id": task_id, "a": a, "b": b, "episodes": episodes, "games": games, "note": note,
            "changes": changes, "last_response_diff": diff}



def logged_games(engine: Engine) -> list[str]:
    """Every game with an episode in the store, sorted."""
    return distinct_values(engine, _E.c.game)


def logged_seats(engine: Engine, game: str | None = None) -> list[str]:
    """Every seat with a turn in the store (in an episode of ``game``, when given: a read of all
    the game's turns, for error messages), sorted."""
    if game is not None:
        return storage.logged.logged_seats(engine, game)
    return distinct_values(engine, _T.c.seat)


def distinct_values(engine: Engine, column: ColumnElement[str]) -> list[str]:
    """The values of ``column``, the first column of an index, sorted, by a loose index scan: one
    index lookup per value. ``SELECT DISTINCT`` reads the whole index (SQLite, and PostgreSQL before
    18): at 265,000 episodes, more than the rest of the episodes page costs."""
    found = select(func.min(column).label("value")).cte("found", recursive=True)
    following = select(func.min(column)).where(column > found.c.value).scalar_subquery()
    found = found.union_all(select(following).where(found.c.value.is_not(None)))
    with engine.connect() as conn:
        return list(conn.scalars(select(found.c.value).where(found.c.value.is_not(None))))


def game_logged(engine: Engine, game: str) -> bool:
    """Whether the store holds an episode of ``game``."""
    return _any(engine, select(_E.c.id).where(_E.c.game == game))


def seat_logged(engine: Engine, seat: str, game: str | None = None) -> bool:
    """Whether the store holds a turn of ``seat`` (in an episode of ``game``, when given)."""
    query = select(_T.c.id).where(_T.c.seat == seat)
    if game is not None:
        query = query.where(_T.c.episode_id.in_(select(_E.c.id).where(_E.c.game == game)))
    return _any(engine, query)


def _any(engine: Engine, query: Select[Any]) -> bool:
    with engine.connect() as conn:
        return conn.execute(query.limit(1)).first() is not None
