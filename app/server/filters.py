"""Query parameters of the episode lists (API and pages alike) to a checked EpisodeFilter.

Every parameter arrives as text (an HTML form sends empty fields as ``name=``, which means
"no filter") and is checked here, so that a malformed one is a 400 that names it and says
what it accepts. A game or seat is checked against the registry first, then, when the registry
does not know it, against what the store logged: the episodes of a game played through
`sparring gateway` (an external game: docs/gateway.md) are listed and filtered like any game's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from typing import Annotated

from fastapi import Query
from sqlalchemy import Engine

from storage import logged
from storage.keyset import SORT_KEYS
from storage.queries import EpisodeFilter, resolve_run_id
from storage.records import EpisodeStatus
from storage.search import SearchError, check_search

MAX_LIMIT = 500
DEFAULT_LIMIT = 50
COUNT_LIMIT = 1000
"""A page counts the matching episodes up to this many and then says "more than": an exact
count of a common word costs far more than the page itself on a large store
(docs/results/2026-11-27-benchmarks.md, bench/serve_pages.py)."""
DEFAULTS = {"sort": "-started_at"}
"""parameters left out of links when they have their default value"""


class BadParameter(ValueError):
    """A query parameter that cannot be used; ``name`` is the parameter."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


@dataclass
class EpisodeQuery:
    flt: EpisodeFilter
    sort: str = "-started_at"
    limit: int = DEFAULT_LIMIT
    after: str | None = None
    count: bool = True
    given: dict[str, str] = field(default_factory=dict)
    """the parameters given (non-empty), to build links that keep them"""

    def against(self, engine: Engine) -> EpisodeQuery:
        """The query checked against the store: a game or seat that the registry does not know is
        one the store logged (an external game's, played through `sparring gateway`), and the run,
        given as a unique id prefix, is resolved to the run's id."""
        check_game(engine, self.flt.game)
        check_seat(engine, self.flt.seat, self.flt.game)
        if self.flt.run_id is None:
            return self
        try:
            return replace(self, flt=replace(self.flt, run_id=resolve_run_id(engine, self.flt.run_id)))
        except KeyError as exc:
            raise BadParameter("run", exc.args[0]) from None


@cache
def seats_by_game() -> dict[str, list[str]]:
    """The registry's games and the seats each one's spec names."""
    from graphs.registry import game_registry

    return {name: [seat.name for seat in game.seats] for name, game in game_registry().items()}


def registered_seats(game: str | None) -> list[str]:
    """The seats the spec of ``game`` names (of every game, without one; none for a game the registry does not know)."""
    return list(dict.fromkeys(s for g, names in seats_by_game().items() if game in (None, g) for s in names))


def known_games(engine: Engine) -> list[str]:
    """The registry's games, then the other games the store holds episodes of (external games)."""
    return list(dict.fromkeys([*seats_by_game(), *logged.logged_games(engine)]))


def known_seats(engine: Engine) -> list[str]:
    """The seats the registry's games name, then the other seats the store logged turns of."""
    return list(dict.fromkeys([*registered_seats(None), *logged.logged_seats(engine)]))


def check_game(engine: Engine, game: str | None) -> None:
    """A game filter matches something: a registered game, or one the store logged (else 400)."""
    if game is None or game in seats_by_game() or logged.game_logged(engine, game):
        return
    raise BadParameter("game", f"no such game {game!r}; use one of: {', '.join(known_games(engine))}")


def check_seat(engine: Engine, seat: str | None, game: str | None) -> None:
    """A seat filter names a seat of the game's spec (of any game's, without a game filter) or a
    seat the store logged turns of (in that game), else 400: a filter that cannot match anything
    would show an empty list as if nothing had been played."""
    if seat is None or seat in registered_seats(game) or logged.seat_logged(engine, seat, game):
        return
    valid = dict.fromkeys([*registered_seats(game), *logged.logged_seats(engine, game)])
    where = f" in {game}" if game else ""
    raise BadParameter("seat", f"no such seat {seat!r}{where}; use one of: {', '.join(valid)}")


def _float(name: str, value: str | None) -> float | None:
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        raise BadParameter(name, f"{value!r} is not a number; give e.g. 0.5") from None
    if not math.isfinite(number):
        raise BadParameter(name, f"{value!r} is not a finite number")
    return number


def _time(name: str, value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadParameter(name, f"{value!r} is not an ISO date or time; give e.g. 2026-11-21 or "
                                 "2026-11-21T14:00") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def no_nul(parameters: dict[str, str | None]) -> None:
    """A NUL character in any text parameter is a 400 naming it (no stored text holds one, and
    PostgreSQL refuses it in a query)."""
    for name, value in parameters.items():
        if isinstance(value, str) and "\x00" in value:
            raise BadParameter(name, "holds a NUL character (%00), which no stored text contains; remove it")


def _one_of(name: str, value: str | None, valid: list[str]) -> str | None:
    if value and value not in valid:
        raise BadParameter(name, f"no such {name} {value!r}; use one of: {', '.join(valid)}")
    return value or None



def episode_query(
    game: Annotated[str | None, Query(description="Only this game: one of the registry, or another game the store "
                                      "logged (an external game, played through `sparring gateway`).")] = None,
    status: Annotated[str | None, Query(description="running, succeeded, failed or timeout.")] = None,
    seat: Annotated[str | None, Query(description="Only episodes with a turn from this seat (a seat of the game's "
                                      "spec, or one the store logged).")] = None,
    policy: Annotated[str | None, Query(description="Only episodes with a turn of this policy, matched exactly: an "
                                        "adapter version (actor@v1), 'base' or a policy label.")] = None,
    run: Annotated[str | None, Query(description="Only this run (its id or a unique start of it).")] = None,
    task_id: Annotated[str | None, Query(description="Only this task.")] = None,
    min_reward: Annotated[str | None, Query(description="Reward at least this (a number).")] = None,
    max_reward: Annotated[str | None, Query(description="Reward at most this (a number).")] = None,
    since: Annotated[str | None, Query(description="Started at or after this ISO time (UTC if no zone).")] = None,
    until: Annotated[str | None, Query(description="Started before this ISO time (UTC if no zone).")] = None,
    q: Annotated[str | None, Query(description="Words that a turn's prompt or response contains (all of them, "
                                   "whole words; quotes and operators are searched as text).")] = None,
    sort: Annotated[str, Query(description=f"Sort key, '-' for descending: {', '.join(SORT_KEYS)}.")] = "-started_at",
    limit: Annotated[str | None, Query(description=f"Rows per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT}).")]
    = None,
    after: Annotated[str | None, Query(description="Start after this episode id (keyset paging: the "
                                       "`next_after` of the previous page).")] = None,
    count: Annotated[str | None, Query(description="'false' to skip counting the matches (counted up to "
                                       f"{COUNT_LIMIT:,}, then 'more than {COUNT_LIMIT:,}').")] = None,
) -> EpisodeQuery:
    """The checked query; BadParameter names the first parameter that is wrong."""
    given = {k: v for k, v in locals().items() if isinstance(v, str) and v not in ("", DEFAULTS.get(k))}
    no_nul(given)
    _one_of("status", status, [s.value for s in EpisodeStatus])
    if sort.removeprefix("-") not in SORT_KEYS:
        raise BadParameter("sort", f"no such sort key {sort!r}; use one of: "
                                   + ", ".join(f"{k}, -{k}" for k in SORT_KEYS))
    try:
        text = check_search(q) if q and q.strip() else None
    except SearchError as exc:
        raise BadParameter("q", str(exc)) from None
    rows = DEFAULT_LIMIT if not limit else _int("limit", limit)
    if not 1 <= rows <= MAX_LIMIT:
        raise BadParameter("limit", f"{rows} is out of range; give 1 to {MAX_LIMIT}")
    if count not in (None, "", "true", "false", "1", "0"):
        raise BadParameter("count", f"{count!r}: give true or false")
    low, high = _float("min_reward", min_reward), _float("max_reward", max_reward)
    if low is not None and high is not None and low > high:
        raise BadParameter("min_reward", f"{low:g} is above max_reward {high:g}, so nothing can match; swap them")
    flt = EpisodeFilter(
        game=game or None, status=status or None, seat=seat or None, policy=policy or None, run_id=run or None,
        task_id=task_id or None, min_reward=low, max_reward=high, since=_time("since", since),
        until=_time("until", until),
        text=text,
    )
    return EpisodeQuery(flt, sort, rows, after or None, count not in ("false", "0"), given)


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise BadParameter(name, f"{value!r} is not a whole number") from None
