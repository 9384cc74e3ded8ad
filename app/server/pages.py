"""The web pages: episodes (filters, search, live), one episode, compare, lineage, learning.

Jinja2 renders every page on the server with autoescaping on, so whatever a model wrote is
shown as text; HTMX (static/htmx.min.js) swaps in the fragments under /fragments.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from app.commands.settings_cmd import mask_url
from app.server import reads
from app.server.api import EngineDep, QueryDep, compare_task, episode_or_404, page_of
from app.server.filters import known_games, known_seats
from storage import viewer_rows
from storage.keyset import SORT_KEYS
from storage.records import EpisodeStatus

HERE = Path(__file__).parent
SEAT_COLOURS = 6
LIVE_SECONDS = 5
router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=HERE / "templates")


def _short(value: Any, n: int = 8) -> str:
    return "" if value is None else str(value)[:n]


def _when(value: Any) -> str:
    return "" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _num(value: Any) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def _plain(value: Any) -> str:
    """A logged value as a person reads it: a dict as ``key: value`` pairs, a list as items
    separated by commas, a number as ``num`` shows it (never a Python or JSON literal)."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return " · ".join(f"{key}: {_plain(item)}" for key, item in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_plain(item) for item in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return _num(value)


def _seat_class(seat: str) -> str:
    """One colour per seat name, the same on every page."""
    return f"seat-{int(hashlib.md5(seat.encode()).hexdigest(), 16) % SEAT_COLOURS}"


def _logprob_class(logprob: float | None) -> str:
    if logprob is None:
        return "lp-none"
    return f"lp-{min(4, int(-logprob // 1))}"


templates.env.filters.update(short=_short, when=_when, num=_num, plain=_plain, seat_class=_seat_class,
                             lp_class=_logprob_class)


def mount_static(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")


def error_page(request: Request, status: int, detail: str) -> HTMLResponse:
    return templates.TemplateResponse(request, "error.html", {"status": status, "detail": detail},
                                      status_code=status)


def _episodes_context(engine: Any, query: Any) -> dict[str, Any]:
    page = page_of(engine, query)
    given = {k: v for k, v in query.given.items() if k != "after"}
    live = query.after is None
    return {"page": page, "given": given, "query": query, "live": live, "live_seconds": LIVE_SECONDS,
            "fragment_url": "/fragments/episodes?" + urlencode(query.given),
            "next_url": "/?" + urlencode({**given, "after": page["next_after"]}) if page["next_after"] else None}


@router.get("/", response_class=HTMLResponse)
def episodes_page(request: Request, engine: EngineDep, query: QueryDep) -> HTMLResponse:
    context = {**_episodes_context(engine, query), "games": known_games(engine), "seats": known_seats(engine),
               "statuses": [s.value for s in EpisodeStatus], "sort_keys": SORT_KEYS}
    return templates.TemplateResponse(request, "episodes.html", context)


@router.get("/fragments/episodes", response_class=HTMLResponse)
def episodes_fragment(request: Request, engine: EngineDep, query: QueryDep) -> HTMLResponse:
    """The results block alone (the filter form and the live poll swap it in)."""
    response = templates.TemplateResponse(request, "_results.html", _episodes_context(engine, query))
    response.headers["HX-Push-Url"] = "/?" + urlencode(query.given)
    return response


@router.get("/episodes/{episode_id}", response_class=HTMLResponse)
def episode_page(request: Request, engine: EngineDep, episode_id: str) -> HTMLResponse:
    episode = episode_or_404(engine, episode_id, tokens=False)
    rewards: dict[str | None, list[dict[str, Any]]] = {}
    for reward in episode["rewards"]:
        rewards.setdefault(reward["turn_id"], []).append(reward)
    turn_idx = {turn["id"]: turn["idx"] for turn in episode["turns"]}
    return templates.TemplateResponse(request, "episode.html", {"e": episode, "rewards": rewards, "turn_idx": turn_idx})


@router.get("/episodes/{episode_id}/turns/{idx}/tokens", response_class=HTMLResponse)
def turn_tokens(request: Request, engine: EngineDep, episode_id: str, idx: int) -> HTMLResponse:
    """One turn's completion tokens coloured by logprob (asked for on the episode page)."""
    from app.token_view import aligned_tokens

    episode = episode_or_404(engine, episode_id, tokens=True)
    turn = next((t for t in episode["turns"] if t["idx"] == idx), None)
    if turn is None:
        raise HTTPException(404, f"episode {episode['id']} has no turn {idx} (it has {len(episode['turns'])})")
    note = None
    try:
        tokens = aligned_tokens(turn, request.app.state.decoder)
    except Exception as exc:  # a tokenizer that cannot load: show the ids, say why
        note = f"token text unavailable ({type(exc).__name__}: {exc}); showing ids"
        logprobs = turn.get("logprobs") or []
        tokens = [{"id": i, "text": f"#{i}", "logprob": logprobs[n] if n < len(logprobs) else None}
                  for n, i in enumerate(turn.get("completion_token_ids") or [])]
    return templates.TemplateResponse(request, "_tokens.html", {"tokens": tokens, "note": note})


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    engine: EngineDep,
    a: Annotated[str | None, Query()] = None,
    b: Annotated[str | None, Query()] = None,
    task_id: Annotated[str | None, Query()] = None,
    task: Annotated[str | None, Query()] = None,
) -> HTMLResponse:
    task_id = compare_task(a, b, task_id, task)
    context: dict[str, Any] = {"a": a or "", "b": b or "", "task_id": task_id or "", "tasks": None, "result": None}
    if a and b and task_id:
        try:
            context["result"] = reads.compare(engine, task_id, a, b)
        except KeyError as exc:
            raise HTTPException(404, exc.args[0]) from None
    elif a and b:
        context["tasks"] = reads.tasks_of(engine, a, b)
    return templates.TemplateResponse(request, "compare.html", context)


@router.get("/docs", response_class=HTMLResponse)
def api_docs(request: Request) -> HTMLResponse:
    """The API described from its OpenAPI schema, as a page of this server (no script from elsewhere)."""
    schema = request.app.openapi()
    routes = [{"method": method.upper(), "path": path, "summary": op.get("summary", ""),
               "description": op.get("description", ""),
               "parameters": [{"name": p["name"], "in": p["in"], "required": p.get("required", False),
                               "description": p.get("description", "")} for p in op.get("parameters", [])]}
              for path, methods in schema.get("paths", {}).items() for method, op in methods.items()]
    return templates.TemplateResponse(request, "api_docs.html", {"routes": routes, "info": schema.get("info", {})})


@router.get("/lineage", response_class=HTMLResponse)
def lineage_page(request: Request, engine: EngineDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "lineage.html", {"versions": viewer_rows.lineage(engine)})


@router.get("/learning", response_class=HTMLResponse)
def learning_page(request: Request, engine: EngineDep) -> HTMLResponse:
    store = request.app.state.store
    report, key = request.app.state.plots.current(engine, mask_url(store.database_url))
    return templates.TemplateResponse(request, "learning.html", {"report": report, "key": key})


@router.get("/plots/{key}/{name}")
def plot(request: Request, key: str, name: str) -> FileResponse:
    path = request.app.state.plots.png(key, name)
    if path is None:
        raise HTTPException(404, f"no plot {name!r}; open /learning for the current ones")
    return FileResponse(path, media_type="image/png")
