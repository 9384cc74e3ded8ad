"""Reading the logs: filtered, sorted, paged episode lists, one episode in full, and
streams of episodes or turns for exports and dataset builders.

All filtering happens in SQL, on the indexed narrow columns of ``episodes`` and ``turns``.
Results are plain dicts; timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Engine, Select, and_, case, distinct, func, or_, select

from storage import keyset
from storage.orphans import INTERRUPTED_STAGE
from storage.records import EpisodeStatus
from storage.search import TextSearch
from storage.search_page import ReadBy, first_matching
from storage.tables import EPISODE_PAYLOADS as _EP
from storage.tables import EPISODES as _E
from storage.tables import JUDGMENTS as _J
from storage.tables import REWARDS as _R
from storage.tables import RUNS as _RUNS
from storage.tables import TURN_PAYLOADS as _TP
from storage.tables import TURNS as _T
from storage.where import Where

_PAYLOAD = ("task", "seats", "outcome", "error")
_TURN_COLUMNS = (*(c for c in _T.columns if c.name != "episode_id"), *(c for c in _TP.columns if c.name != "turn_id"))
"""A turn with its payload, as nested in an episode."""
COUNTED_TURNS = 10
"""A count of a search stopped at N first reads at most N * COUNTED_TURNS matching turns: when
those hold more than N episodes, more than N match."""
BASE_POLICY = "base"
"""What a policy filter calls the base model played with no adapter (its turns log the
model's name, e.g. ``bundled``)."""
SCRIPTED_BACKEND = "scripted"
"""The backend name of rule-based bots (graphs.policies.scripted): their token ids are bytes
and their logprobs 0, so their turns are never training data."""


def policy_is(policy: str) -> ColumnElement[bool]:
    """Turns played by ``policy``, matched exactly: an adapter version's name (``actor@v1``,
    never ``actor@v10``), a whole policy label (``scripted:calculator``, ``gpt-4o-mini``), or
    ``base``: a model turn that no adapter served (a turn without adapter is served by the
    model its label names; one with an adapter by the adapter, its label being MODEL+ADAPTER)."""
    if policy == BASE_POLICY:
        return (_T.c.served_by == _T.c.policy) & (_T.c.backend != SCRIPTED_BACKEND)
    return (_T.c.served_by == policy) | (_T.c.policy == policy)


@dataclass
class EpisodeFilter:
    """Which episodes to read; fields left None do not filter.

    ``seat``: the episode has a turn played by that seat. ``policy``: the episode has a turn
    played by that policy (``policy_is``: an exact adapter version, policy label, or
    ``base``). ``min_reward <= reward <= max_reward``;
    ``since <= started_at < until``. When turns are read (``iter_turns``, exports of turns),
    ``seat`` and ``policy`` select the turns themselves.
    """

    game: str | None = None
    status: str | None = None
    seat: str | None = None
    policy: str | None = None
    run_id: str | None = None
    """the run's episodes, and those of its workers' runs (`sparring play --workers`)"""
    task_id: str | None = None
    split: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None
    """words that a turn's prompt or response contains (storage.search.TextSearch; SearchError when
    it has no word)"""


@dataclass
class Page:
    items: list[dict[str, Any]]
    total: int | None
    """how many episodes match the filter, all pages together (None when not counted, or when
    more than ``count_limit`` match: then ``more_than`` says so)"""
    limit: int | None
    offset: int
    more_than: int | None = None
    """``count_limit`` when more episodes than that match (``total`` is then None)"""
    read_by: ReadBy | None = None
    """how a search's page was read (storage.search_page); None without a search or a limit"""


def in_run(run_id: str) -> ColumnElement[bool]:
    """Episodes of the run ``run_id`` or of one of its workers' runs."""
    runs = select(_RUNS.c.id).where((_RUNS.c.id == run_id) | (_RUNS.c.parent_id == run_id))
    return _E.c.run_id.in_(runs)


def _conditions(flt: EpisodeFilter, dialect: str) -> Where:
    """``flt`` in SQL; ``seat`` and ``policy`` as conditions on turns."""
    c = Where()
    for name in ("game", "status", "task_id", "split"):
        value = getattr(flt, name)
        if value is not None:
            c.episode.append(_E.c[name] == value)
    if flt.run_id is not None:
        c.episode.append(in_run(flt.run_id))
    if flt.min_reward is not None:
        c.episode.append(_E.c.reward >= flt.min_reward)
    if flt.max_reward is not None:
        c.episode.append(_E.c.reward <= flt.max_reward)
    if flt.since is not None:
        c.episode.append(_E.c.started_at >= flt.since)
    if flt.until is not None:
        c.episode.append(_E.c.started_at < flt.until)
    if flt.text is not None:
        c.episode.append(TextSearch(dialect, flt.text).condition())
    if flt.seat is not None:
        c.turn.append(_T.c.seat == flt.seat)
    if flt.policy is not None:
        c.turn.append(policy_is(flt.policy))
    return c


_EPISODE_COLUMNS = tuple(c for c in _E.columns if c.name != "commit_seq")
"""an episode as read: its commit number is the store's bookkeeping for dataset builds (``storage.commits``)"""


def _episode_select(*payload_columns: str) -> Select[Any]:
    payload = (_EP.c[name] for name in payload_columns)
    return select(*_EPISODE_COLUMNS, *payload).select_from(_E.outerjoin(_EP, _EP.c.episode_id == _E.c.id))


def list_episodes(
    engine: Engine,
    flt: EpisodeFilter | None = None,
    *,
    sort: str = "-started_at",
    limit: int | None = 20,
    offset: int = 0,
    after: str | None = None,
    count: bool = True,
    count_limit: int | None = None,
) -> Page:
    """One page of episodes (narrow columns and seats) and how many match in all.

    ``after``: the id of the last episode of the previous page; the page starts right after
    it (``offset`` then counts from there). Unlike an offset, this keyset paging reads none
    of the earlier pages, so a deep page costs what the first one does. ``count=False``
    leaves ``total`` None: on a large store, counting every match is most of a page's cost
    when the filter selects many episodes through their turns (``seat``, ``policy``, ``text``).
    ``count_limit``: count no further than that; when more match, ``total`` is None and
    ``more_than`` is ``count_limit`` (a page of a search then costs milliseconds at 1M turns).
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 (or None for all), got {limit}")
    if offset < 0:
        raise ValueError(f"offset must be >= 0, got {offset}")
    if count_limit is not None and count_limit < 0:
        raise ValueError(f"count_limit must be >= 0 (or None to count every match), got {count_limit}")
    flt = flt or EpisodeFilter()
    dialect = engine.dialect.name
    search = TextSearch(dialect, flt.text) if flt.text is not None else None
    where = _conditions(replace(flt, text=None), dialect)  # the search is added below
    order = keyset.order_by(sort)
    with engine.connect() as conn:
        page_where = where
        if after is not None:
            page_where = where.also(keyset.after(conn, sort, after))
        read_by = None
        if search is None or limit is None:
            text = [] if search is None else [search.condition()]
            page = (_episode_select("seats").where(*page_where.exists(), *text).order_by(*order)
                    .limit(limit).offset(offset))
            items = [row._asdict() for row in conn.execute(page)]
        else:
            searched = first_matching(conn, page_where, search, sort, offset + limit)
            items, read_by = _in_order(conn, searched.ids[offset:], order), searched.read_by
        total = more_than = None
        if count and after is None and (limit is None or len(items) < limit) and (items or offset == 0):
            total = offset + len(items)  # the page holds the last match
        elif count:
            total = _count(conn, where, search, sort, count_limit)
    if count_limit is not None and total is not None and total > count_limit:
        total, more_than = None, count_limit
    return Page(items=items, total=total, limit=limit, offset=offset, more_than=more_than, read_by=read_by)


def _in_order(conn: Connection, ids: list[str], order: list[ColumnElement[Any]]) -> list[dict[str, Any]]:
    """The page's episodes ``ids`` (narrow columns and seats), in ``order``."""
    if not ids:
        return []
    return [row._asdict() for row in conn.execute(_episode_select("seats").where(_E.c.id.in_(ids)).order_by(*order))]


def _count(conn: Connection, where: Where, search: TextSearch | None, sort: str, limit: int | None) -> int:
    """How many episodes match; with ``limit``, no more than ``limit + 1``, read as: the first
    ``limit + 1`` episodes, or for a search, the episodes of its first ``limit * COUNTED_TURNS``
    matching turns (all of them when fewer match), and when those hold too few episodes, its
    first ``limit + 1`` matching episodes (storage.search_page)."""
    kept = where.exists()
    if limit is None:
        text = [] if search is None else [search.condition()]
        return conn.execute(select(func.count()).select_from(_E).where(*kept, *text)).scalar_one()
    if search is not None:
        turns = search.turns().limit(limit * COUNTED_TURNS).subquery()
        if kept:  # the episodes of those turns that the filter keeps
            matching = and_(_E.c.id == turns.c.episode_id, *kept)
            episodes = func.count(distinct(case((_E.c.id.is_not(None), turns.c.episode_id))))
            counted = select(func.count(), episodes).select_from(turns.outerjoin(_E, matching))
        else:  # every turn's episode is kept: no need to look them up
            counted = select(func.count(), func.count(distinct(turns.c.episode_id)))
        read, episodes = conn.execute(counted).one()
        if episodes > limit or read < limit * COUNTED_TURNS:
            return episodes
        return len(first_matching(conn, where, search, sort, limit + 1).ids)
    first = select(_E.c.id).where(*kept).limit(limit + 1).subquery()
    return conn.execute(select(func.count()).select_from(first)).scalar_one()


def count_episodes_by_status(engine: Engine, run_id: str | None = None) -> dict[str, int]:
    stmt = select(_E.c.status, func.count()).group_by(_E.c.status)
    if run_id is not None:
        stmt = stmt.where(in_run(run_id))
    with engine.connect() as conn:
        return {status: count for status, count in conn.execute(stmt)}


def played_seeds(engine: Engine, run_id: str) -> dict[int, str]:
    """Seed -> status of the episodes of a run (and its workers' runs) that were played to their
    end: every status but ``running``, less the episodes an interruption cut short (error_stage
    "interrupted"). A command whose episode i has seed SEED+i learns from it what is left to play."""
    stmt = select(_E.c.seed, _E.c.status).where(
        in_run(run_id),
        _E.c.status != EpisodeStatus.RUNNING.value,
        or_(_E.c.error_stage.is_(None), _E.c.error_stage != INTERRUPTED_STAGE),
    )
    with engine.connect() as conn:
        return {seed: status for seed, status in conn.execute(stmt)}


def get_episode(engine: Engine, id_or_prefix: str) -> dict[str, Any]:
    """The episode with this id (or the only one whose id starts with it): its columns, its
    payload, its turns in order with their payloads, its rewards and its judgments."""
    if not id_or_prefix:
        raise KeyError("give an episode id, or the first characters of one")
    with engine.connect() as conn:
        episode_id = _resolve_id(conn, id_or_prefix)
        episode = conn.execute(_episode_select(*_PAYLOAD).where(_E.c.id == episode_id)).one()._asdict()
        return _with_children(conn, [episode])[0]


def resolve_run_id(engine: Engine, id_or_prefix: str) -> str:
    """The id of the run whose id is or (alone) starts with ``id_or_prefix``; KeyError otherwise."""
    if not id_or_prefix:
        raise KeyError("give a run id, or the first characters of one")
    with engine.connect() as conn:
        return _resolve_id(conn, id_or_prefix, _RUNS.c.id, "run")


def _resolve_id(conn: Connection, id_or_prefix: str, column: Any = _E.c.id, noun: str = "episode") -> str:
    if conn.execute(select(column).where(column == id_or_prefix)).first() is not None:
        return id_or_prefix
    starts = column.startswith(id_or_prefix, autoescape=True)
    matches = conn.scalars(select(column).where(starts).order_by(column).limit(6)).all()
    if not matches:
        raise KeyError(f"no {noun} id is or starts with {id_or_prefix!r}")
    if len(matches) > 1:
        shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
        raise KeyError(f"{id_or_prefix!r} is the start of several {noun} ids ({shown}); give more characters")
    return matches[0]


def iter_episodes(
    engine: Engine, flt: EpisodeFilter | None = None, *, chunk_size: int = 200
) -> Iterator[dict[str, Any]]:
    """Every matching episode in full (as ``get_episode`` returns it), oldest first, read
    ``chunk_size`` episodes at a time."""
    _check_chunk_size(chunk_size)
    where = _conditions(flt or EpisodeFilter(), engine.dialect.name).exists()
    stmt = _episode_select(*_PAYLOAD).where(*where).order_by(_E.c.started_at, _E.c.id)
    with engine.connect() as conn:
        # yield_per on the statement: on the connection it would stream the child queries too
        result = conn.execute(stmt.execution_options(yield_per=chunk_size))
        for rows in result.partitions():
            yield from _with_children(conn, [row._asdict() for row in rows])


def _with_children(conn: Connection, episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attach turns (with payloads), rewards and judgments to episode dicts, in three queries."""
    by_id = {e["id"]: e for e in episodes}
    for e in episodes:
        e["turns"], e["rewards"], e["judgments"] = [], [], []
    ids = list(by_id)
    turns = (
        select(_T.c.episode_id, *_TURN_COLUMNS)
        .select_from(_T.outerjoin(_TP, _TP.c.turn_id == _T.c.id))
        .where(_T.c.episode_id.in_(ids))
        .order_by(_T.c.episode_id, _T.c.idx)
    )
    for key, stmt in (
        ("turns", turns),
        ("rewards", select(*_R.columns).where(_R.c.episode_id.in_(ids)).order_by(_R.c.id)),
        ("judgments", select(*_J.columns).where(_J.c.episode_id.in_(ids)).order_by(_J.c.id)),
    ):
        for row in conn.execute(stmt):
            child = row._asdict()
            by_id[child.pop("episode_id")][key].append(child)
    return episodes


def iter_turns(
    engine: Engine, flt: EpisodeFilter | None = None, *, chunk_size: int = 1000
) -> Iterator[dict[str, Any]]:
    """One flat dict per matching turn: the turn's columns (its id as ``turn_id``), its payload,
    and its episode's narrow columns (prefixed ``episode_`` where a name would be ambiguous:
    ``episode_seed``, ``episode_status``, ``episode_reward``, ``episode_started_at``,
    ``episode_finished_at``). Streamed ``chunk_size`` rows at a time; episodes oldest first,
    turns in order."""
    _check_chunk_size(chunk_size)
    with engine.connect() as conn:
        result = conn.execute(_turn_select(flt or EpisodeFilter(), engine.dialect.name)
                              .execution_options(yield_per=chunk_size))
        for rows in result.partitions():
            for row in rows:
                yield row._asdict()


def turn_reward_names(engine: Engine, flt: EpisodeFilter | None = None) -> list[str]:
    """The names of the rewards given to the turns ``iter_turns`` yields for ``flt``, sorted."""
    turn_ids = _turn_select(flt or EpisodeFilter(), engine.dialect.name).with_only_columns(_T.c.id).order_by(None)
    with engine.connect() as conn:
        return list(conn.scalars(select(_R.c.name).where(_R.c.turn_id.in_(turn_ids)).distinct().order_by(_R.c.name)))


def _turn_select(flt: EpisodeFilter, dialect: str) -> Select[Any]:
    c = _conditions(flt, dialect)
    episode_columns = [
        _E.c.run_id,
        _E.c.game,
        _E.c.task_id,
        _E.c.task_source,
        _E.c.split,
        _E.c.difficulty,
        _E.c.seed.label("episode_seed"),
        _E.c.status.label("episode_status"),
        _E.c.reward.label("episode_reward"),
        _E.c.num_turns,
        _E.c.error_stage,
        _E.c.started_at.label("episode_started_at"),
        _E.c.finished_at.label("episode_finished_at"),
    ]
    turn_columns = [_T.c.id.label("turn_id"), _T.c.episode_id, *(col for col in _TURN_COLUMNS if col.name != "id")]
    return (
        select(*turn_columns, *episode_columns)
        .select_from(_T.join(_E, _E.c.id == _T.c.episode_id).outerjoin(_TP, _TP.c.turn_id == _T.c.id))
        .where(*c.episode, *c.turn)
        .order_by(_E.c.started_at, _E.c.id, _T.c.idx)
    )


def _check_chunk_size(chunk_size: int) -> None:
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
