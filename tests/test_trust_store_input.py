"""Bad input to the store and the commands that read it: one clear line that touches nothing
(a SQLite URL with two slashes, a folder that does not exist, a port that is no number), no
password in any printed form of a URL, reading a SQLite file nobody may write, a page past
the end, a reward range that cannot match, an export onto an existing file, a seat naming a
version the registry lacks (refused before a run is opened), and the PostgreSQL driver
installed by scripts/setup or named exactly in the error."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli import app
from factories import record_episode
from uvicorn_thread import free_port
from storage.engine import POSTGRES_INSTALL, DatabaseError, open_store
from storage.models import Run
from storage.recorder import Recorder

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "S3cretPassw0rd"


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("SPARRING_DATABASE_URL", raising=False)
    return work


@pytest.mark.parametrize(("url", "message"), [
    ("sqlite://stores/x.db", "has two slashes after 'sqlite:', which would make 'stores' a host; a SQLite file "
                             "takes three: sqlite:///stores/x.db"),
    ("sqlite:///missing/folder/x.db", "the folder 'missing/folder' of the SQLite database 'missing/folder/x.db' "
                                      "does not exist: create it (mkdir -p missing/folder)"),
])
def test_a_wrong_sqlite_url_is_one_line_and_creates_nothing(cwd: Path, url: str, message: str):
    for how in (("--db", url), ()):
        code, output = _run("episodes", "list", *how, env=None if how else {"SPARRING_DATABASE_URL": url})
        assert code == 2 and message in output and "Traceback" not in output, output
        assert output.startswith("error: ") and output.count("error:") == 1
    assert sorted(p.name for p in cwd.iterdir()) == []


@pytest.mark.parametrize("url", [
    f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432",  # no database name
    f"postgresql:/postgres:{PASSWORD}@127.0.0.1:5432/db",  # one slash after the scheme
    f"postgresql:postgres:{PASSWORD}@127.0.0.1:5432/db",  # none
    f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:notaport/db",
    f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/db",  # nothing listens there
    f"postgres://postgres:{PASSWORD}@127.0.0.1:1/db",
    f"nosuchdb://root:{PASSWORD}@127.0.0.1/db",
    f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/db?password={PASSWORD}",
])
def test_no_printed_form_of_a_url_shows_its_password(cwd: Path, url: str):
    for how in (("--db", url), ()):
        code, output = _run("episodes", "list", *how, env=None if how else {"SPARRING_DATABASE_URL": url})
        assert code == 2 and PASSWORD not in output and "****" in output, output


def test_the_postgres_driver_is_installed_by_setup_or_named_in_the_error(monkeypatch: pytest.MonkeyPatch):
    setup = (ROOT / "scripts" / "setup").read_text()
    pin = re.search(r"^psycopg\[binary\]==[\d.]+$", (ROOT / "requirements-dev.txt").read_text(), re.MULTILINE)
    assert pin is not None and "grep -m1 '^psycopg\\[binary\\]==' requirements-dev.txt" in setup
    assert setup.index("-r requirements.txt") < setup.index("psycopg") < setup.index("--no-deps -e .")
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as in an environment without the driver
    with pytest.raises(DatabaseError) as missing:
        open_store(f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432/db")
    assert "is not installed" in str(missing.value) and f"Fix: {POSTGRES_INSTALL}" in str(missing.value)
    assert POSTGRES_INSTALL == ".venv/bin/pip install 'psycopg[binary]'"


@pytest.fixture
def listed(store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """Five episodes with rewards 0, 0.25, 0.5, 0.75, 1."""
    monkeypatch.setenv("SPARRING_DATABASE_URL", store_url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    engine = open_store(store_url)
    with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        for i in range(5):
            record_episode(recorder, minute=i, task_id=f"t{i}", reward=i / 4)
    engine.dispose()
    return store_url


def test_paging_past_the_end_and_a_range_that_cannot_match_are_refused(listed: str):
    code, output = _run("episodes", "list", "--limit", "2", "--page", "3")
    assert code == 0 and "page 3/3 · 5 matching" in output
    code, output = _run("episodes", "list", "--limit", "2", "--page", "99")
    assert code == 2 and "--page 99 is past the last page: 5 episode(s) match, 3 page(s) of 2" in output
    assert "page 99/3" not in output
    code, output = _run("episodes", "list", "--min-reward", "5", "--max-reward", "1")
    assert code == 2 and "--min-reward 5 is above --max-reward 1, so no episode could match; swap them" in output
    code, output = _run("episodes", "list", "--min-reward", "0.5", "--max-reward", "0.75", "--format", "json")
    assert code == 0 and output.count('"task_id"') == 2


def test_export_keeps_an_existing_file_unless_forced(listed: str, tmp_path: Path):
    target = tmp_path / "turns.jsonl"
    target.write_text("keep me\n")
    code, output = _run("export", str(target))
    assert code == 2 and "exists already: pass --force to overwrite it" in output
    assert target.read_text() == "keep me\n"
    code, output = _run("export", str(target), "--force")
    assert code == 0 and len(target.read_text().splitlines()) == 5 * 2


def test_a_seat_naming_a_missing_version_is_refused_before_a_run_is_opened(listed: str):
    code, output = _run("play", "math-reflection", "-n", "1", "--seat", "actor=model:actor@v99",
                        "--seat", "critic=scripted:always-correct")
    assert code == 2 and "--seat actor=model:actor@v99: no adapter version is named 'actor@v99'" in output
    engine = open_store(listed)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Run)).scalar_one() == 0
    engine.dispose()


def _as_nobody() -> list[str]:
    """A command prefix that runs as nobody when the tests run as root (root writes anything)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): cannot run a command as another user")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def read_only_store() -> Iterator[Path]:
    """A SQLite store with one episode, in a folder nobody but root may write, the file read-only."""
    folder = Path(tempfile.mkdtemp(prefix="sparring-ro-", dir="/tmp"))
    store = folder / "store.db"
    engine = open_store(f"sqlite:///{store}")
    with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        record_episode(recorder, task_id="read-only-task")
    engine.dispose()
    store.chmod(0o444)
    folder.chmod(0o755)
    try:
        yield store
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _environ(home: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    environ.update(HOME=str(home), SPARRING_DATA_DIR=str(home / "data"), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=str(ROOT))
    return environ


def test_reading_a_sqlite_file_nobody_may_write_needs_no_write_access(read_only_store: Path):
    home = Path(tempfile.mkdtemp(prefix="sparring-home-", dir="/tmp"))
    home.chmod(0o777)
    try:
        listed = subprocess.run([*_as_nobody(), sys.executable, "-m", "app.cli", "episodes", "list", "--db",
                                 f"sqlite:///{read_only_store}", "--format", "json"], cwd="/", env=_environ(home),
                                capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0 and "read-only-task" in listed.stdout, listed.stderr
        port = free_port()
        log = home / "serve.log"
        with log.open("w") as output:
            server = subprocess.Popen([*_as_nobody(), sys.executable, "-m", "app.cli", "serve", "--port", str(port),
                                       "--db", f"sqlite:///{read_only_store}"], cwd="/", env=_environ(home),
                                      stdout=output, stderr=subprocess.STDOUT)
        try:
            assert _get(port, "/api/episodes", server, log) == 200
        finally:
            server.terminate()
            server.wait(timeout=60)
        assert "warning" not in log.read_text()
        assert sorted(p.name for p in read_only_store.parent.iterdir()) == ["store.db"]  # nothing written beside it
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _get(port: int, path: str, server: subprocess.Popen, log: Path) -> int:
    deadline = time.monotonic() + 120
    while True:
        assert server.poll() is None, log.read_text()
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", path)
            return connection.getresponse().status
        except OSError:
            assert time.monotonic() < deadline, "the server did not answer within 2 minutes"
            time.sleep(0.2)


def test_an_invalid_setting_writes_no_log_anywhere(tmp_path: Path):
    """The console is quieted into SPARRING_DATA_DIR's log only once the settings are valid: an
    invalid one is reported on one line and leaves neither ./sparring-data nor the data folder."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    env.update(SPARRING_DATA_DIR=str(tmp_path / "data"), SPARRING_SEED="not-a-number")
    done = subprocess.run([sys.executable, "-m", "app.cli", "episodes", "list"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "SPARRING_SEED" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert list(work.iterdir()) == [] and not (tmp_path / "data").exists()
