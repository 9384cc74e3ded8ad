"""Database fixtures: storage tests run on a SQLite file and on PostgreSQL.

PostgreSQL tests need SPARRING_TEST_POSTGRES_URL (a server where the user may create
databases); each test gets a database of its own, dropped afterwards. Without the variable
they are skipped, with the reason shown in the report.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from ctrl_c import ctrl_c  # noqa: F401  (a fixture for the tests about Ctrl-C)
from storage.engine import open_store
from storage.scratch import scratch_postgres_database
from tiny_model import random_adapter_on_tiny_base

POSTGRES_ENV = "SPARRING_TEST_POSTGRES_URL"
POSTGRES_SKIP_REASON = (
    f"set {POSTGRES_ENV}=postgresql+psycopg://postgres@127.0.0.1:5432/test to run PostgreSQL tests"
)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a fresh, empty PostgreSQL database (skipped without the server variable)."""
    server_url = os.environ.get(POSTGRES_ENV)
    if not server_url:
        pytest.skip(POSTGRES_SKIP_REASON)
    with scratch_postgres_database(server_url, prefix="sparring_test") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty store: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def url(store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """An empty store on each backend that CLI commands run in this process use (settings by
    environment, no default seats), with its own data folder."""
    monkeypatch.setenv("SPARRING_DATABASE_URL", store_url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    return store_url


@pytest.fixture
def store(store_url: str) -> Iterator[Engine]:
    """An open, migrated store on each backend."""
    engine = open_store(store_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sums(tmp_path) -> Path:
    """A task file of eight sums ("What is a + 7?") with GSM8K-style answers."""
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {a} + 7?", "answer": f"#### {a + 7}"}) + "\n"
                            for a in range(8)))
    return path


@pytest.fixture(scope="module")
def adapter_template(tmp_path_factory) -> tuple[str, Path]:
    """A tiny random base model and a random LoRA adapter for it, for gate tests to publish."""
    return random_adapter_on_tiny_base(tmp_path_factory.mktemp("base"), tmp_path_factory.mktemp("trained"))
