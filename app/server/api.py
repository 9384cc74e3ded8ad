"""The JSON API under /api (described by /api/openapi.json). Every route only reads."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from sqlalchemy import Engine

from app.server import reads
from app.server.filters import COUNT_LIMIT, BadParameter, EpisodeQuery, episode_query, no_nul
from storage import viewer_rows
from storage.engine import ping
from storage.queries import get_episode, list_episodes

router = APIRouter(prefix="/api", tags=["api"])
TOKEN_FIELDS = ("prompt_token_ids", "completion_token_ids", "logprobs")


def store_engine(request: Request) -> Engine:
    """The store's engine (503 while the database is down: see app.server.store)."""
    return request.app.state.store.engine()


EngineDep = Annotated[Engine, Depends(store_engine)]
QueryDep = Annotated[EpisodeQuery, Depends(episode_query)]


def page_of(engine: Engine, query: EpisodeQuery) -> dict[str, Any]:
    """One page of episodes for ``query``: items, total (None with count=false, or when more than
    COUNT_LIMIT match: then more_than is COUNT_LIMIT) and the id to pass as ``after`` for the
    next page (None on the last one)."""
    query = query.against(engine)
    try:
        page = list_episodes(engine, query.flt, sort=query.sort, limit=query.limit, after=query.after,
                             count=query.count, count_limit=COUNT_LIMIT)
    except KeyError as exc:
        raise BadParameter("after", exc.args[0]) from None
    full = len(page.items) == query.limit
    return {"items": page.items, "total": page.total, "more_than": page.more_than, "limit": query.limit,
            "next_after": page.items[-1]["id"] if page.items and full else None}


@router.get("/episodes", summary="Episodes with filters, full-text search, sorting and keyset paging",
            description=f"`total` counts the matching episodes, all pages together, up to {COUNT_LIMIT:,}; when "
                        f"more match, `total` is null and `more_than` is {COUNT_LIMIT} (`count=false`: both null).")
def episodes(engine: EngineDep, query: QueryDep) -> dict[str, Any]:
    return page_of(engine, query)


def episode_or_404(engine: Engine, episode_id: str, tokens: bool) -> dict[str, Any]:
    try:
        episode = get_episode(engine, episode_id)
    except KeyError as exc:
        raise HTTPException(404, exc.args[0]) from None
    if not tokens:
        for turn in episode["turns"]:
            for name in TOKEN_FIELDS:
                turn.pop(name, None)
    return episode


@router.get("/episodes/{episode_id}", summary="One episode: turns (messages, response, verdict), rewards, judgments")
def episode(
    engine: EngineDep,
    episode_id: str,
    tokens: Annotated[bool, Query(description="Also each turn's token ids and logprobs.")] = False,
) -> dict[str, Any]:
    return episode_or_404(engine, episode_id, tokens)


@router.get("/runs", summary="The newest runs with their summaries (an evaluation's metrics)")
def runs(engine: EngineDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[dict[str, Any]]:
    return viewer_rows.list_runs(engine, limit)


@router.get("/runs/{run_id}", summary="One run (id or unique prefix) and its episodes counted by status")
def run(engine: EngineDep, run_id: str) -> dict[str, Any]:
    from storage.queries import resolve_run_id

    try:
        return reads.get_run(engine, resolve_run_id(engine, run_id))
    except KeyError as exc:
        raise HTTPException(404, exc.args[0]) from None


@router.get("/adapters", summary="Adapter versions with lineage: parent, dataset snapshot, job, gate figures")
def adapters(engine: EngineDep) -> list[dict[str, Any]]:
    return viewer_rows.lineage(engine)


@router.get("/datasets", summary="Dataset snapshots: kind, role, rows, the filter and watermark that made them")
def datasets(engine: EngineDep) -> list[dict[str, Any]]:
    return viewer_rows.list_datasets(engine)


@router.get("/evaluations", summary="Evaluations of adapter versions on held-out tasks, and every evaluation "
                                    "series of the store (sparring report)")
def evaluations(engine: EngineDep) -> dict[str, Any]:
    from evaluation.report import read_report

    report = read_report(engine)
    return {"evaluations": viewer_rows.list_evaluations(engine),
            "series": [record for series in report.series for record in series.records()],
            "retrain_rounds": report.rounds}


def compare_task(a: str | None, b: str | None, task_id: str | None, task: str | None) -> str | None:
    """The task of a comparison, given as ``task_id`` or ``task`` (400 when both, differing)."""
    no_nul({"a": a, "b": b, "task_id": task_id, "task": task})
    if task_id and task and task_id != task:
        raise BadParameter("task", f"{task!r} differs from task_id {task_id!r}; give one of them")
    return task_id or task or None


@router.get("/compare", summary="One task played by two policies: the latest episode of each and what changed; "
                                "without task_id, the tasks both played")
def compare(
    engine: EngineDep,
    a: Annotated[str, Query(description="A policy: adapter version (actor@v1), 'base' or a policy label.")],
    b: Annotated[str, Query(description="The other policy.")],
    task_id: Annotated[str | None, Query(description="The task; omit to list the tasks both played.")] = None,
    task: Annotated[str | None, Query(description="Same as task_id.")] = None,
) -> dict[str, Any]:
    task_id = compare_task(a, b, task_id, task)
    if not task_id:
        return {"a": a, "b": b, "tasks": reads.tasks_of(engine, a, b)}
    try:
        return reads.compare(engine, task_id, a, b)
    except KeyError as exc:
        raise HTTPException(404, exc.args[0]) from None


@router.get("/health", summary="ok when the database answers (503 with the cause when it does not)")
def health(engine: EngineDep) -> dict[str, str]:
    ping(engine)
    return {"status": "ok"}
