"""How a search's page is read (storage.search_page), on SQLite and PostgreSQL: a common word
missing from the first episodes in the page's order is found by probing farther down rather
than by reading every match, with the same pages as the plain ways; the keyset condition the
walk goes on from; the estimate of the matches it is bounded with.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from factories import T0, episode_start, record_episode, turn_record
from sqlalchemy import Engine, event, select, text

import storage.search
import storage.search_page
from storage import keyset
from storage.engine import open_store
from storage.models import Episode, Turn
from storage.queries import EpisodeFilter, list_episodes, policy_is
from storage.recorder import Recorder
from storage.records import EpisodeStatus
from storage.search import TextSearch
from storage.where import Where

OLD, NEW = 30, 10
"""episodes whose two turns say "legacy", then newer ones (half of them debates) that do not"""


@pytest.fixture
def legacy(store_url: str) -> Iterator[tuple[Engine, list[str]]]:
    """A store of OLD episodes with the word in both turns, then NEW without it; the ids of the
    OLD ones, newest first."""
    engine = open_store(store_url)
    old = []
    with Recorder(engine, batch_size=64, flush_interval_s=0.01) as recorder:
        for minute in range(OLD + NEW):
            start = episode_start(started_at=T0 + timedelta(minutes=minute),
                                  game="debate" if minute >= OLD and minute % 2 else "math-reflection")
            recorder.episode_started(start)
            word = "legacy" if minute < OLD else "current"
            for index in range(2):
                recorder.turn(turn_record(start.id, index, response=f"The {word} answer is {minute}."))
            if minute < OLD:
                old.insert(0, start.id)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:  # the statistics matching_turns reads (autovacuum's job on a real store)
            conn.execute(text("ANALYZE turn_search"))
    yield engine, old
    engine.dispose()


def _scaled(monkeypatch: pytest.MonkeyPatch, probes_per_turn: float) -> None:
    """A store of 40 episodes at the scale of 1M turns: "legacy" is common (in more than
    COMMON_TURNS turns) and missing from the PROBED_EPISODES newest episodes."""
    monkeypatch.setattr(storage.search, "COMMON_TURNS", 4)
    monkeypatch.setattr(storage.search_page, "PROBED_EPISODES", 3)
    monkeypatch.setattr(storage.search_page, "PROBES_PER_TURN", {"sqlite": probes_per_turn,
                                                                 "postgresql": probes_per_turn})


def test_a_common_word_missing_from_the_newest_episodes_is_probed_for_farther_down(
        legacy: tuple[Engine, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    engine, old = legacy
    flt = EpisodeFilter(text="legacy")
    straight = [list_episodes(engine, flt, limit=4, offset=offset, count=False) for offset in (0, 4)]
    assert {page.read_by for page in straight} == {"matches"}  # 60 matching turns: not common
    assert [[e["id"] for e in page.items] for page in straight] == [old[:4], old[4:8]]

    _scaled(monkeypatch, probes_per_turn=1.0)  # probe on as far as 60 turns' worth: every episode
    probed = [list_episodes(engine, flt, limit=4, offset=offset, count=False) for offset in (0, 4)]
    assert [(page.items, page.read_by) for page in probed] == [(page.items, "probe") for page in straight]
    after = list_episodes(engine, flt, limit=4, after=old[3], count=False)
    assert (after.items, after.read_by) == (straight[1].items, "probe")

    _scaled(monkeypatch, probes_per_turn=0.0)  # no farther than PROBED_EPISODES: then the matches
    fallen = list_episodes(engine, flt, limit=4, count=False)
    assert (fallen.items, fallen.read_by) == (straight[0].items, "probe, then matches")


def test_a_probe_through_every_episode_of_the_filter_gives_the_whole_short_page(
        legacy: tuple[Engine, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    engine, old = legacy
    _scaled(monkeypatch, probes_per_turn=1.0)
    debates = list_episodes(engine, EpisodeFilter(text="legacy", game="debate"), limit=4)
    assert (debates.items, debates.total, debates.read_by) == ([], 0, "probe")
    oldest = list_episodes(engine, EpisodeFilter(text="legacy", until=T0 + timedelta(minutes=2)), limit=4)
    assert ([e["id"] for e in oldest.items], oldest.read_by) == (old[-2:], "probe")


RUNS = (("math-reflection", 6), ("debate", 4), ("math-reflection", 8), ("debate", 6), ("math-reflection", 6))
"""blocks of episodes of one game each, oldest first, as runs log them"""


@pytest.fixture
def games(store_url: str) -> Iterator[Engine]:
    """A store of RUNS: every critic turn of a math-reflection episode says "arithmetic" (a word
    of that game and seat only); every debate has "rebuttal" in its debater_b turn (played by
    the policy "stubborn"), and the debates of the older run also "precedent" in their
    debater_a turn (a word of old debates only)."""
    engine = open_store(store_url)
    minute = 0
    with Recorder(engine, batch_size=64, flush_interval_s=0.01) as recorder:
        for run, (game, episodes) in enumerate(RUNS):
            for _ in range(episodes):
                start = episode_start(started_at=T0 + timedelta(minutes=minute), game=game)
                recorder.episode_started(start)
                for index in range(2):
                    played: dict[str, str] = {}
                    if game == "debate":
                        seat = ("debater_a", "debater_b")[index]
                        words = "rebuttal" if index else "opening" + (" precedent" if run == 1 else "")
                        played = {"policy": "scripted:stubborn", "served_by": "stubborn"} if index else {}
                    else:
                        seat, words = ("actor", "critic")[index], "the arithmetic checks out" if index else "answer"
                    recorder.turn(turn_record(start.id, index, seat=seat, response=f"{words} {minute}", **played))
                minute += 1
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("ANALYZE turn_search"))
    yield engine
    engine.dispose()


@pytest.mark.parametrize("fields", [{"game": "debate", "text": "arithmetic"},
                                    {"seat": "debater_b", "text": "arithmetic"},
                                    {"seat": "critic", "text": "rebuttal"},
                                    {"seat": "debater_a", "text": "precedent"},
                                    {"policy": "stubborn", "text": "arithmetic"},
                                    {"policy": "stubborn", "text": "precedent"},
                                    {"game": "debate", "text": "precedent"},
                                    {"game": "math-reflection", "text": "arithmetic"}])
def test_a_word_of_another_game_or_seat_gives_the_plain_pages_every_way(
        games: Engine, monkeypatch: pytest.MonkeyPatch, fields: dict[str, str]) -> None:
    """The filter selects episodes in which the word is nowhere (or only far down): however far
    the walk goes first and on, the pages are those of reading the matches, and the page says
    how it was read."""
    flt = EpisodeFilter(**fields)
    orders = ("-started_at", "started_at", "-num_turns")
    plain = {(sort, limit): [e["id"] for e in list_episodes(games, flt, sort=sort, limit=limit, count=False).items]
             for sort in orders for limit in (1, 3, 50)}
    monkeypatch.setattr(storage.search, "COMMON_TURNS", 3)  # every word here is common
    read_by = set()
    for probed in (1, 2, 5, 40):
        for per_turn in (0.0, 0.1, 0.5, 1.0, 100.0):
            monkeypatch.setattr(storage.search_page, "PROBED_EPISODES", probed)
            monkeypatch.setattr(storage.search_page, "PROBES_PER_TURN", {"sqlite": per_turn, "postgresql": per_turn})
            for (sort, limit), ids in plain.items():
                page = list_episodes(games, flt, sort=sort, limit=limit, count=False)
                assert [e["id"] for e in page.items] == ids, (probed, per_turn, sort, limit)
                read_by.add(page.read_by)
    assert read_by == {"probe", "probe, then matches"}


def test_a_word_in_no_episode_of_the_filter_is_walked_through_every_one(
        games: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within its reach, the walk goes through all the filter's episodes and then knows the page is
    empty (no read of the matches); beyond it, it reads the matches."""
    monkeypatch.setattr(storage.search, "COMMON_TURNS", 3)
    monkeypatch.setattr(storage.search_page, "PROBED_EPISODES", 3)
    debates = EpisodeFilter(game="debate", text="arithmetic")  # 20 turns, 10 debates
    for per_turn, read_by in ((1.0, "probe"), (0.5, "probe, then matches"), (100.0, "probe")):  # walk on 17, 7, 1997
        monkeypatch.setattr(storage.search_page, "PROBES_PER_TURN", {"sqlite": per_turn, "postgresql": per_turn})
        page = list_episodes(games, debates, limit=50)
        assert (page.items, page.total, page.read_by) == ([], 0, read_by)
    old = list_episodes(games, EpisodeFilter(game="debate", text="precedent"), limit=2)  # 4 turns: walks on 397
    assert ([e["game"] for e in old.items], old.total, old.read_by) == (["debate"] * 2, 4, "probe")


@pytest.mark.parametrize(("turn", "episodes"), [({"seat": "critic"}, 20), ({"policy": "stubborn"}, 10),
                                                ({"policy": "smollm2@base"}, 30),
                                                ({"seat": "critic", "policy": "stubborn"}, 0)])
def test_a_turn_filter_keeps_the_same_episodes_as_exists_and_as_in(games: Engine, turn: dict[str, str],
                                                                   episodes: int) -> None:
    """Both conditions on one turn: no critic turn is stubborn's."""
    where = Where([], [Turn.__table__.c.seat == turn["seat"]] if "seat" in turn else [])
    if "policy" in turn:
        where.turn.append(policy_is(turn["policy"]))
    newest_first = keyset.order_by("-started_at")
    with games.connect() as conn:
        kept = [list(conn.scalars(select(Episode.__table__.c.id).where(*form).order_by(*newest_first)))
                for form in (where.exists(), where.in_())]
    assert kept[0] == kept[1]
    assert len(kept[0]) == episodes


def test_only_the_walk_on_lists_a_turn_filter_with_in(games: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first walk, like a plain page, wants the first few episodes: EXISTS. The walk on
    expects to list most of them: IN."""
    monkeypatch.setattr(storage.search, "COMMON_TURNS", 3)
    monkeypatch.setattr(storage.search_page, "PROBED_EPISODES", 3)
    monkeypatch.setattr(storage.search_page, "PROBES_PER_TURN", {"sqlite": 100.0, "postgresql": 100.0})
    statements: list[str] = []
    listen = (games, "before_cursor_execute", lambda *args: statements.append(args[2]))
    event.listen(*listen)
    try:
        page = list_episodes(games, EpisodeFilter(seat="debater_b", text="arithmetic"), limit=50)
    finally:
        event.remove(*listen)
    assert (page.items, page.total, page.read_by) == ([], 0, "probe")
    walks = [sql for sql in statements if "row_number() OVER" in sql]
    assert len(walks) == 2  # the first walk, then on
    in_turns = [" IN (SELECT turns.episode_id" in sql for sql in walks]
    assert in_turns == [False, True]


def test_matching_turns_counts_the_few_and_estimates_the_many_on_postgres(
        legacy: tuple[Engine, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    engine, _ = legacy
    monkeypatch.setattr(storage.search, "COMMON_TURNS", 2 * NEW)  # "current": counted on both
    with engine.connect() as conn:
        turns = {word: TextSearch(engine.dialect.name, word).matching_turns(conn)
                 for word in ("legacy", "current", "answer", "nowhere")}
    if engine.dialect.name == "sqlite":
        assert turns == {"legacy": 2 * OLD, "current": 2 * NEW, "answer": 2 * (OLD + NEW), "nowhere": 0}
    else:  # past COMMON_TURNS, the planner's estimates: the right order of magnitude
        assert (turns["current"], turns["nowhere"]) == (2 * NEW, 0)
        assert 2 * OLD / 2 <= turns["legacy"] <= 2 * OLD * 2, turns
        assert 2 * (OLD + NEW) / 2 <= turns["answer"] <= 2 * (OLD + NEW) * 2, turns


@pytest.mark.parametrize("sort", [f"{d}{k}" for k in keyset.SORT_KEYS for d in ("", "-")])
def test_after_an_episode_comes_the_rest_of_the_order(store: Engine, sort: str) -> None:
    """Ties and nulls included: the episodes after one are the order's tail past it."""
    with Recorder(store, batch_size=64, flush_interval_s=0.01) as recorder:
        for minute, (turns, status, reward, finished) in enumerate(
                [(2, EpisodeStatus.SUCCEEDED, 1.0, True), (1, EpisodeStatus.FAILED, None, True),
                 (2, EpisodeStatus.SUCCEEDED, 1.0, True), (3, EpisodeStatus.SUCCEEDED, 0.5, True),
                 (1, EpisodeStatus.SUCCEEDED, None, False), (2, EpisodeStatus.SUCCEEDED, None, False)]):
            record_episode(recorder, turns=turns, status=status, reward=reward, finished=finished,
                           minute=minute % 4)  # equal start times: ties broken by id
    e = Episode.__table__
    with store.connect() as conn:
        order = list(conn.scalars(select(e.c.id).order_by(*keyset.order_by(sort))))
        for at, episode_id in enumerate(order):
            rest = conn.scalars(select(e.c.id).where(keyset.after(conn, sort, episode_id))
                                .order_by(*keyset.order_by(sort)))
            assert list(rest) == order[at + 1:], (sort, at)
