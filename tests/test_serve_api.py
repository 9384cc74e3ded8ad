"""`sparring serve`: the JSON API and pages on a real SQLite file and PostgreSQL database.

Filters, search and paging; bad input (400 naming the parameter, 404 with a message, search
operators taken as text); counts that stop at a limit and say so; model output escaped;
read-only; token and bind rules; the search index (migrations 0003, 0006) filled for logs
written before it and kept in step with turns that change; both ways of reading a search's
page give the same page.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, insert, make_url, select, update
from typer.testing import CliRunner

import storage.queries
import storage.search
import storage.search_page
from app.cli import app as cli
from app.server import api
from app.server.app import create_app
from app.server.security import BindError, check_bind
from factories import record_episode
from storage.engine import open_store
from storage.migrate import alembic_config, upgrade_to_head
from storage.models import AdapterVersion, DatasetSnapshot, Episode, Turn, TurnPayload
from storage.queries import EpisodeFilter, list_episodes
from storage.records import EpisodeStatus
from storage.recorder import Recorder

XSS = "<script>alert('pwned')</script> the answer is 7"
TOKEN = "a-long-enough-test-token-0123456789"
LOCAL = "http://127.0.0.1:8765"
"""the base URL of in-process clients: a loopback name, which a loopback-bound viewer answers"""


@pytest.fixture
def logged(store_url: str) -> dict:
    """A store with five episodes: three of smollm2@base (one failed), two of actor@v1, one of
    which answered with a <script> tag."""
    engine = open_store(store_url)
    with Recorder(engine, batch_size=64, flush_interval_s=0.01) as recorder:
        base = [record_episode(recorder, minute=m, task_id=f"t{m}") for m in range(2)]
        failed = record_episode(recorder, minute=2, task_id="t2", status=EpisodeStatus.FAILED, reward=0.0,
                                error_stage="critic")
        v1 = record_episode(recorder, minute=3, task_id="t0", policy="actor@v1", reward=0.5)
    with Recorder(engine, batch_size=64, flush_interval_s=0.01) as recorder:
        from factories import episode_start, turn_record

        start = episode_start(task_id="t1", started_at=datetime(2025, 3, 1, 12, 4, tzinfo=UTC),
                              seats={"actor": "<b>actor@v1</b>"}, task={"question": XSS, "answer": "7"})
        recorder.episode_started(start)
        recorder.turn(turn_record(start.id, 0, response=XSS, policy="actor@v1", served_by="actor@v1"))
    engine.dispose()
    return {"url": store_url, "base": base, "failed": failed, "v1": v1, "xss": start}


@pytest.fixture
def client(logged: dict) -> Iterator[TestClient]:
    with TestClient(create_app(logged["url"]), base_url=LOCAL) as test_client:
        yield test_client


def _ids(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def test_filters_sort_and_keyset_paging(client: TestClient, logged: dict):
    everything = client.get("/api/episodes").json()
    assert everything["total"] == 5 and everything["next_after"] is None
    assert _ids(client.get("/api/episodes?status=failed")) == [logged["failed"].start.id]
    assert set(_ids(client.get("/api/episodes?policy=actor@v1"))) == {logged["v1"].start.id, logged["xss"].id}
    assert _ids(client.get("/api/episodes?min_reward=0.4&max_reward=0.6")) == [logged["v1"].start.id]
    assert _ids(client.get("/api/episodes?since=2025-03-01T12:03")) == [logged["xss"].id, logged["v1"].start.id]
    first = client.get("/api/episodes?limit=2&sort=started_at").json()
    assert [i["id"] for i in first["items"]] == [e.start.id for e in logged["base"]]
    second = client.get(f"/api/episodes?limit=2&sort=started_at&after={first['next_after']}&count=false").json()
    assert [i["id"] for i in second["items"]] == [logged["failed"].start.id, logged["v1"].start.id]
    assert second["total"] is None


def test_search_matches_words_and_takes_operators_as_text(client: TestClient, logged: dict):
    assert _ids(client.get("/api/episodes", params={"q": "answer 7"})) == [logged["xss"].id]
    assert set(_ids(client.get("/api/episodes", params={"q": "PWNED"}))) == {logged["xss"].id}
    for text in ['" OR 1=1 --', "'; DROP TABLE episodes; --", "answer NEAR(pwned)", "answ*", 'turn) OR ("x']:
        response = client.get("/api/episodes", params={"q": text})
        assert response.status_code == 200, (text, response.text)
        assert response.json()["items"] == [], text  # no episode has all these words (answ* is no prefix)
    response = client.get("/api/episodes", params={"q": '*"()'})
    assert response.status_code == 400 and response.json()["parameter"] == "q"
    engine = open_store(logged["url"])
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Episode)).scalar_one() == 5
    engine.dispose()


def test_counts_stop_at_the_limit_and_say_so(client: TestClient, logged: dict, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(api, "COUNT_LIMIT", 3)
    for query in ("", "q=answer", "seat=actor&q=answer"):  # all five episodes
        page = client.get(f"/api/episodes?{query}").json()
        assert (page["total"], page["more_than"], len(page["items"])) == (None, 3, 5), query
        assert "more than 3 matching" in client.get(f"/?{query}").text
    assert client.get("/api/episodes?q=pwned").json() | {"items": []} == {
        "items": [], "total": 1, "more_than": None, "limit": 50, "next_after": None}
    assert "1 matching" in client.get("/?q=pwned").text
    unbounded = client.get("/api/episodes?q=answer&count=false").json()
    assert unbounded["total"] is None and unbounded["more_than"] is None
    assert "page of 50" in client.get("/?q=answer&count=false").text
    monkeypatch.setattr(api, "COUNT_LIMIT", 5)  # exactly as many as match: an exact count
    assert client.get("/api/episodes?q=answer").json()["total"] == 5


def test_a_search_reads_the_same_page_every_way(logged: dict, monkeypatch: pytest.MonkeyPatch):
    """Words in few turns: their episodes are looked up and sorted. In many: the first episodes
    in the page's order are probed, then as many more as the matches are worth, and when too
    few of them match, the matches are read instead. Counts stopped at a limit read the first matching turns, or when those hold too
    few episodes, the first matching episodes the same way as a page. Every way gives the same
    pages, counts and keyset paging."""
    engine = open_store(logged["url"])
    cases = [("answer", {}, "-started_at"), ("answer", {"seat": "critic"}, "reward"),
             ("the answer", {"min_reward": 0.4}, "started_at"), ("turn 1", {}, "-reward"),
             ("pwned", {}, "-started_at"), ("nowhere", {}, "-started_at")]
    farther, no_farther = {"sqlite": 100.0, "postgresql": 100.0}, {"sqlite": 0.0, "postgresql": 0.0}
    ways = [{"COMMON_TURNS": 10_000}, {"COMMON_TURNS": 0},
            {"COMMON_TURNS": 0, "PROBED_EPISODES": 1, "PROBES_PER_TURN": farther},  # on past the first
            {"COMMON_TURNS": 0, "PROBED_EPISODES": 1, "PROBES_PER_TURN": no_farther, "COUNTED_TURNS": 1}]
    modules = {"COMMON_TURNS": storage.search, "PROBED_EPISODES": storage.search_page,
               "PROBES_PER_TURN": storage.search_page, "COUNTED_TURNS": storage.queries}
    read_by = set()
    pages: dict[tuple[str, str], list[object]] = {}
    try:
        for way in ways:
            for name, value in way.items():
                monkeypatch.setattr(modules[name], name, value)
            for text, fields, sort in cases:
                flt = EpisodeFilter(text=text, **fields)
                first = list_episodes(engine, flt, sort=sort, limit=2)
                capped = list_episodes(engine, flt, sort=sort, limit=2, count_limit=1)
                after = first.items[-1]["id"] if first.items else None
                rest = list_episodes(engine, flt, sort=sort, limit=None, after=after, count=False)
                read_by.add(first.read_by)
                pages.setdefault((text, sort), []).append(
                    ([e["id"] for e in first.items], first.total, capped.total, capped.more_than,
                     [e["id"] for e in rest.items]))
    finally:
        engine.dispose()
    assert read_by == {"matches", "probe", "probe, then matches"}
    for (text, sort), found in pages.items():
        assert found[1:] == found[:-1], (text, sort)
    assert pages[("answer", "-started_at")][0][1:4] == (5, None, 1)
    assert pages[("pwned", "-started_at")][0][:4] == ([logged["xss"].id], 1, 1, None)
    assert pages[("turn 1", "-reward")][0][1] == 4  # every episode with a second turn: not the <script> one


def test_search_index_follows_turns_that_change(store_url: str):
    """A payload rewritten, a turn moved to another episode, a payload deleted: the index follows
    (sparring does none of these; the migration's triggers keep the index true when someone does)."""
    engine = open_store(store_url)
    with Recorder(engine, batch_size=64, flush_interval_s=0.01) as recorder:
        a, b = record_episode(recorder), record_episode(recorder, minute=1)

    def found(text: str) -> set[str]:
        return {e["id"] for e in list_episodes(engine, EpisodeFilter(text=text), limit=None).items}

    try:
        assert found("turn 0") == found("answer 6") == {a.start.id, b.start.id}
        with engine.begin() as conn:
            conn.execute(update(TurnPayload).where(TurnPayload.turn_id == a.turns[1].id)
                         .values(response="a walrus"))
            conn.execute(update(Turn).where(Turn.id == a.turns[1].id).values(episode_id=b.start.id))
            conn.execute(delete(TurnPayload).where(TurnPayload.turn_id == b.turns[0].id))
        assert found("walrus") == {b.start.id}
        assert found("answer 6") == {b.start.id}  # a's turn that said it now says walrus
        assert found("turn 0") == {a.start.id}
    finally:
        engine.dispose()


def test_one_episode_and_unknown_ones(client: TestClient, logged: dict):
    episode_id = logged["failed"].start.id
    plain = client.get(f"/api/episodes/{episode_id[:10]}").json()
    assert plain["id"] == episode_id and len(plain["turns"]) == 2 and "logprobs" not in plain["turns"][0]
    assert plain["turns"][0]["response"] == logged["failed"].turns[0].response
    assert len(plain["rewards"]) == 2 and plain["judgments"][0]["rationale"] == "the second answer checks out"
    full = client.get(f"/api/episodes/{episode_id}?tokens=true").json()
    assert full["turns"][1]["completion_token_ids"] == logged["failed"].turns[1].completion_token_ids
    missing = client.get("/api/episodes/ffff0000")
    assert missing.status_code == 404 and "no episode id is or starts with 'ffff0000'" in missing.json()["detail"]
    page = client.get("/episodes/ffff0000")
    assert page.status_code == 404 and "no episode id is or starts with" in page.text


@pytest.mark.parametrize(
    ("query", "parameter"),
    [("min_reward=abc", "min_reward"), ("since=yesterday", "since"), ("sort=-colour", "sort"),
     ("status=done", "status"), ("limit=0", "limit"), ("limit=many", "limit"), ("game=chess", "game"),
     ("seat=goalkeeper", "seat"), ("after=0123abcd", "after"), ("run=nope", "run"), ("count=maybe", "count")],
)
def test_malformed_filters_are_400_naming_the_parameter(client: TestClient, query: str, parameter: str):
    response = client.get(f"/api/episodes?{query}")
    assert response.status_code == 400
    assert response.json()["parameter"] == parameter and response.json()["detail"].startswith(f"{parameter}: ")
    page = client.get(f"/?{query}")
    assert page.status_code == 400 and f"{parameter}: " in page.text


def test_model_output_is_escaped_everywhere(client: TestClient, logged: dict):
    xss = logged["xss"].id
    for path in (f"/episodes/{xss}", "/compare?a=smollm2@base&b=actor@v1&task_id=t1"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert "<script>alert" not in response.text, path
        assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in response.text, path
    assert "script-src 'self'" in response.headers["content-security-policy"]
    for path in ("/?q=pwned", "/fragments/episodes?q=pwned"):  # the list shows seats' policies
        response = client.get(path)
        assert "<b>actor@v1</b>" not in response.text and "&lt;b&gt;actor@v1&lt;/b&gt;" in response.text, path


def test_pages_show_what_is_logged(client: TestClient, logged: dict):
    failed = logged["failed"]
    episodes = client.get("/?status=failed").text
    assert failed.start.id[:8] in episodes and logged["v1"].start.id[:8] not in episodes
    assert 'hx-trigger="every 5s"' in episodes  # the first page polls for new episodes
    page = client.get(f"/episodes/{failed.start.id}").text
    assert "error at critic" in page and "served by <code>smollm2@base</code>" in page
    assert "correct = 1" in page and "the second answer checks out" in page
    tokens = client.get(f"/episodes/{failed.start.id}/turns/0/tokens").text
    assert 'title="id 7 · logprob -0.125"' in tokens and "lp-0" in tokens and "lp-3" in tokens
    compare = client.get("/api/compare?a=smollm2@base&b=actor@v1").json()
    assert [t["task_id"] for t in compare["tasks"]] == ["t1", "t0"]
    changed = client.get("/api/compare?a=smollm2@base&b=actor@v1&task_id=t0").json()
    assert {"what": "reward", "a": 1.0, "b": 0.5} in changed["changes"]
    assert client.get("/api/compare?a=base&b=actor@v1&task_id=t0").status_code == 404


def test_live_fragment_shows_new_episodes(client: TestClient, logged: dict):
    before = client.get("/fragments/episodes?game=math-reflection").text
    engine = open_store(logged["url"])
    with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        new = record_episode(recorder, minute=30, task_id="t9")
    engine.dispose()
    after = client.get("/fragments/episodes?game=math-reflection")
    assert new.start.id[:8] not in before and new.start.id[:8] in after.text
    assert after.headers["hx-push-url"] == "/?game=math-reflection"


def test_lineage_of_adapter_versions(client: TestClient, logged: dict):
    engine = open_store(logged["url"])
    with engine.begin() as conn:
        snapshot = conn.execute(insert(DatasetSnapshot).values(
            kind="dpo", role="actor", game="math-reflection", base_model="bundled", filter_spec={"game": "x"},
            row_count=42, path="/tmp/d.jsonl")).inserted_primary_key[0]
        gate = {"metric": "pass@turn-1", "candidate": 0.6, "baseline": 0.5, "baseline_version": "base",
                "decision": "promoted", "reason": "promoted actor@v1 against base: <b>+10 pts</b>"}
        conn.execute(insert(AdapterVersion).values(
            role="actor", version=1, name="actor@v1", base_model="bundled", dataset_snapshot_id=snapshot,
            trainer="dpo", config={}, path="/tmp/a", status="active", eval={"gate": gate}))
    engine.dispose()
    [version] = client.get("/api/adapters").json()
    assert version["dataset"]["row_count"] == 42 and version["gate"]["decision"] == "promoted"
    page = client.get("/lineage").text
    assert "42 rows" in page and "&lt;b&gt;+10 pts&lt;/b&gt;" in page and "<b>promoted</b>" in page


def test_read_only(client: TestClient, logged: dict):
    assert client.post("/api/episodes", json={}).status_code == 405
    assert client.delete(f"/api/episodes/{logged['failed'].start.id}").status_code == 405
    engine = client.app.state.store.engine()
    with pytest.raises(Exception, match="(?i)readonly|read-only|read only"), engine.begin() as conn:
        conn.execute(Episode.__table__.delete())
    assert client.get("/api/episodes").json()["total"] == 5


def test_no_cors(client: TestClient):
    response = client.get("/api/episodes", headers={"Origin": "https://evil.example"})
    assert response.status_code == 200 and "access-control-allow-origin" not in response.headers
    preflight = client.options("/api/episodes", headers={"Origin": "https://evil.example",
                                                          "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in preflight.headers


def test_token_guards_every_request(logged: dict):
    with TestClient(create_app(logged["url"], token=TOKEN), base_url=LOCAL) as client:
        refused = client.get("/api/episodes")
        assert refused.status_code == 401 and "SPARRING_API_TOKEN" in refused.json()["detail"]
        assert client.get("/api/episodes", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
        assert client.get("/api/episodes", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        login = client.get(f"/?status=failed&token={TOKEN}", follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"] == "/?status=failed"
        assert "httponly" in login.headers["set-cookie"].lower()
        assert client.get("/?status=failed").status_code == 200  # the cookie now


def test_other_binds_need_a_token(monkeypatch: pytest.MonkeyPatch):
    check_bind("127.0.0.1", None)
    check_bind("::1", None)
    check_bind("0.0.0.0", TOKEN)
    with pytest.raises(BindError, match="SPARRING_API_TOKEN"):
        check_bind("0.0.0.0", None)
    with pytest.raises(BindError, match="at least 16"):
        check_bind("192.168.1.5", "short")
    monkeypatch.delenv("SPARRING_API_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "SPARRING_API_TOKEN" in result.output


def test_dead_database_is_503_and_the_server_recovers(tmp_path):
    path = tmp_path / "store.db"
    path.mkdir()  # a folder where the database file should be: SQLite cannot open it
    with TestClient(create_app(f"sqlite:///{path}"), base_url=LOCAL) as client:
        dead = client.get("/api/episodes")
        assert dead.status_code == 503 and "cannot open the SQLite database" in dead.json()["detail"]
        page = client.get("/")
        assert page.status_code == 503 and "cannot open the SQLite database" in page.text
        path.rmdir()
        engine = open_store(f"sqlite:///{path}")
        with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
            record_episode(recorder)
        engine.dispose()
        assert client.get("/api/episodes").json()["total"] == 1
        assert client.get("/api/health").json() == {"status": "ok"}


class _Proxy:
    """A TCP proxy to a server that the test takes down (the port refuses connections and
    every open one is cut, as when the database host dies) and brings back on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.port = target, 0
        self._up = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        listener.settimeout(0.05)
        self.port = listener.getsockname()[1]
        self._up.set()
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        self._up.clear()
        with self._lock:
            for sock in self._sockets:
                _close(sock)
            self._sockets.clear()
        time.sleep(0.2)  # the listener closes within one accept timeout

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while self._up.is_set():
                try:
                    client, _ = listener.accept()
                except TimeoutError:
                    continue
                client.settimeout(None)
                upstream = socket.create_connection(self.target)
                with self._lock:
                    self._sockets.update((client, upstream))
                for source, sink in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_postgres_going_down_is_503_with_the_cause_and_the_server_recovers(postgres_url: str, tmp_path):
    """`sparring serve` (a real server process) reads PostgreSQL through a proxy that the
    test takes down and brings back: the server answers 503 with the cause meanwhile, stays up,
    and answers again once the database is reachable, without a restart."""
    engine = open_store(postgres_url)
    with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        logged = record_episode(recorder)
    engine.dispose()
    url = make_url(postgres_url)
    proxy = _Proxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    port = _free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    environ["SPARRING_DATA_DIR"] = str(tmp_path / "data")
    through_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    log = tmp_path / "serve.log"
    serve = [sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--db", through_proxy]
    with log.open("w") as output:
        server = subprocess.Popen(serve, env=environ, stdout=output, stderr=subprocess.STDOUT)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)  # generous: a loaded test machine
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, log.read_text()
            try:
                if http.get("/api/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server did not answer within 5 minutes"
            time.sleep(0.2)
        assert [e["id"] for e in http.get("/api/episodes").json()["items"]] == [logged.start.id]

        proxy.stop()
        for path in ("/api/episodes", f"/api/episodes/{logged.start.id}", "/api/health"):
            down = http.get(path)
            assert down.status_code == 503, (path, down.text)
            detail = down.json()["detail"]
            assert detail.startswith("the database is unavailable: OperationalError: ") and "refused" in detail
        page = http.get("/")
        assert page.status_code == 503 and "the database is unavailable" in page.text
        assert server.poll() is None and "Traceback" not in log.read_text()  # still serving, quietly

        proxy.start()  # the same port: the server's URL is unchanged
        back = http.get("/api/episodes")
        assert back.status_code == 200 and back.json()["total"] == 1
        assert http.get("/api/health").json() == {"status": "ok"}
        assert http.get("/").status_code == 200
    finally:
        http.close()
        server.terminate()
        server.wait(timeout=60)
        proxy.stop()


def test_search_index_covers_logs_written_before_it(store_url: str, monkeypatch: pytest.MonkeyPatch):
    """Upgrading a store that has logs fills the index; later turns are indexed as written."""
    from alembic import command

    engine = open_store(store_url, migrate=False)
    with engine.begin() as conn:
        command.upgrade(alembic_config(connection=conn), "0002")
    with monkeypatch.context() as old_schema, Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        recorder.judgment = lambda record: None  # judgments of today's shape need 0004's columns
        old_schema.setattr("storage.rows.stamp_ended", lambda conn, ids: None)  # commit numbers need 0007's table
        old = record_episode(recorder)
    upgrade_to_head(engine)
    with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        new = record_episode(recorder, minute=5, turns=1)
    engine.dispose()
    with TestClient(create_app(store_url), base_url=LOCAL) as client:
        assert _ids(client.get("/api/episodes?q=answer+6")) == [old.start.id]  # only old has a second turn
        assert set(_ids(client.get("/api/episodes?q=solve"))) == {old.start.id, new.start.id}
