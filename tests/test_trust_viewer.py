"""The viewer answers only its user: on a loopback bind only loopback host names (DNS rebinding
reads nothing), a token redirect stays on the server, the bearer scheme in any case; bad input
is a 400 naming the parameter, a bad database URL a 503 whose cause shows no password; the
compare page takes ``task=`` and says when two episodes are of different games; outcomes read
as text; /docs describes the API. On a real SQLite file and PostgreSQL, and one real server."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx2  # the HTTP client of Starlette's TestClient
import pytest
from fastapi.testclient import TestClient

from app.server.app import create_app
from factories import episode_end, episode_start, turn_record
from uvicorn_thread import free_port
from storage.engine import open_store
from storage.recorder import Recorder

LOCAL = "http://127.0.0.1:8765"
TOKEN = "a-long-enough-test-token-0123456789"
PASSWORD = "S3cretPassw0rd"


@pytest.fixture
def logged(store_url: str) -> dict:
    """Two episodes of task t1 by two policies, of different games, with outcomes."""
    engine = open_store(store_url)
    ids = {}
    with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        for policy, game in (("actor@v1", "math-reflection"), ("actor@v2", "discussion")):
            start = episode_start(task_id="t1", game=game, seats={"actor": policy})
            recorder.episode_started(start)
            recorder.turn(turn_record(start.id, 0, policy=policy, served_by=policy))
            recorder.episode_finished(episode_end(start.id, num_turns=1, outcome={
                "final_answer": "5", "verdict": {"status": "passed", "passed": 3, "total": 3}}))
            ids[policy] = start.id
    engine.dispose()
    return {"url": store_url, **ids}


@pytest.fixture
def client(logged: dict) -> Iterator[TestClient]:
    with TestClient(create_app(logged["url"]), base_url=LOCAL) as test_client:
        yield test_client


@pytest.mark.parametrize("host", ["attacker.example:8765", "attacker.example", "127.0.0.1.nip.io:8765",
                                  "localhost.attacker.example"])
def test_a_loopback_bind_refuses_other_host_names(client: TestClient, host: str):
    answer = client.get("/api/episodes", headers={"host": host})
    assert answer.status_code == 400 and answer.json()["parameter"] == "Host"
    assert "--allow-host" in answer.json()["detail"] and "items" not in answer.text


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:8765", "127.0.0.2"])
def test_a_loopback_bind_answers_loopback_names(client: TestClient, host: str):
    assert client.get("/api/episodes", headers={"host": host}).status_code == 200


def test_allowed_names_and_other_binds(logged: dict):
    with TestClient(create_app(logged["url"], allowed_hosts=("viewer.lan",)), base_url="http://viewer.lan") as c:
        assert c.get("/api/episodes").status_code == 200
        assert c.get("/api/episodes", headers={"host": "other.lan"}).status_code == 400
    with TestClient(create_app(logged["url"], token=TOKEN, host="0.0.0.0"), base_url="http://viewer.lan") as c:
        assert c.get("/api/episodes", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert c.get("/api/episodes").status_code == 401  # off loopback, the token guards


def test_the_token_redirect_stays_on_this_server_and_the_scheme_is_any_case(logged: dict):
    with TestClient(create_app(logged["url"], token=TOKEN), base_url=LOCAL, follow_redirects=False) as c:
        for path, location in (("//evil.example/", "/evil.example/"), ("///evil.example", "/evil.example"),
                               ("/\\evil.example", "/%5Cevil.example"), ("/compare", "/compare")):
            raw = httpx2.URL(LOCAL).copy_with(raw_path=f"{path}?token={TOKEN}".encode())  # the path as sent
            answer = c.get(raw)
            assert answer.status_code == 303 and answer.headers["location"] == location, path
        c.cookies.clear()  # the redirects set the token's cookie: the header alone from here
        for scheme in ("bearer", "BEARER", "Bearer"):
            assert c.get("/api/episodes", headers={"authorization": f"{scheme} {TOKEN}"}).status_code == 200
        assert c.get("/api/episodes", headers={"authorization": f"Basic {TOKEN}"}).status_code == 401


@pytest.mark.parametrize(("path", "parameter"), [
    ("/api/episodes?q=a%00b", "q"), ("/api/episodes?task_id=t%001", "task_id"), ("/?policy=x%00", "policy"),
    ("/api/compare?a=x%00&b=y", "a"), ("/compare?a=x&b=y&task=t%00", "task"),
    ("/api/episodes?min_reward=5&max_reward=1", "min_reward"),
])
def test_bad_input_is_a_400_naming_the_parameter(client: TestClient, path: str, parameter: str):
    answer = client.get(path)
    assert answer.status_code == 400, answer.text
    if path.startswith("/api"):
        assert answer.json()["parameter"] == parameter
    else:
        assert f"{parameter}: " in answer.text


def test_compare_takes_task_and_says_when_the_games_differ(client: TestClient):
    by_task = client.get("/api/compare", params={"a": "actor@v1", "b": "actor@v2", "task": "t1"}).json()
    by_task_id = client.get("/api/compare", params={"a": "actor@v1", "b": "actor@v2", "task_id": "t1"}).json()
    assert by_task["task_id"] == by_task_id["task_id"] == "t1"
    assert by_task["games"] == ["math-reflection", "discussion"] and "different games" in by_task["note"]
    page = client.get("/compare", params={"a": "actor@v1", "b": "actor@v2", "task": "t1"}).text
    assert 'id="compare-note"' in page and "different games" in page


def test_outcomes_read_as_text_not_as_dicts(client: TestClient, logged: dict):
    page = client.get(f"/episodes/{logged['actor@v1']}").text
    assert "<dt>verdict</dt><dd>status: passed · passed: 3 · total: 3</dd>" in page
    assert "{&#34;" not in page and "{'status'" not in page


def test_the_api_is_described_at_docs(client: TestClient):
    page = client.get("/docs")
    assert page.status_code == 200 and "GET /api/episodes" in page.text and "min_reward" in page.text
    assert "<script src=\"http" not in page.text


@pytest.mark.parametrize("url", [
    f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432",  # no database name
    f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:notaport/db",
    f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/db",  # nothing listens there
])
def test_a_bad_database_url_is_a_503_with_the_cause_and_no_password(url: str):
    with TestClient(create_app(url), base_url=LOCAL) as c:
        for path in ("/api/episodes", "/"):
            answer = c.get(path)
            assert answer.status_code == 503 and PASSWORD not in answer.text, answer.text
        assert "****" in c.get("/api/health").json()["detail"] or "127.0.0.1" in c.get("/api/health").text


def test_a_real_server_refuses_a_rebound_host_and_prints_no_password(tmp_path):
    """`sparring serve` as users start it, asked as the campaign's curl did."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    environ["SPARRING_DATA_DIR"] = str(tmp_path / "data")
    store = tmp_path / "store.db"
    open_store(f"sqlite:///{store}").dispose()
    log = tmp_path / "serve.log"
    with log.open("w") as output:
        server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--db",
                                   f"sqlite:///{store}"], env=environ, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, log.read_text()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                connection.request("GET", "/api/health")
                if connection.getresponse().status == 200:
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer within 2 minutes"
                time.sleep(0.2)
        statuses = {}
        for host in (f"attacker.example:{port}", f"127.0.0.1:{port}", f"localhost:{port}"):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/api/episodes", headers={"Host": host})
            statuses[host.split(":")[0]] = connection.getresponse().status
        assert statuses == {"attacker.example": 400, "127.0.0.1": 200, "localhost": 200}
    finally:
        server.terminate()
        server.wait(timeout=60)
    broken_log = tmp_path / "broken.log"
    with broken_log.open("w") as output:  # a URL without a database name: the server starts, and warns
        broken = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(free_port()), "--db",
                                   f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432"],
                                  env=environ, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "serving" not in broken_log.read_text() and broken.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        broken.terminate()
        broken.wait(timeout=60)
    printed = " ".join(broken_log.read_text().split())
    assert "names no database" in printed and "postgres:****@127.0.0.1" in printed and PASSWORD not in printed
