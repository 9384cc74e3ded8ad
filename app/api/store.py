"""The store: open it, check that it can be written, and clean up what stopped processes left."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine

from app.api.errors import InputError
from app.settings import Settings, SettingsError, load_settings


def settings(**overrides: object) -> Settings:
    """The settings (environment, ``.env``, defaults) with ``overrides`` (e.g. ``database_url``,
    ``seed``) on top; InputError for a setting that cannot be read."""
    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        raise InputError(str(exc)) from exc


def open_store(database_url: str | None = None) -> Engine:
    """The store at ``database_url`` (default: SPARRING_DATABASE_URL, else ``sqlite:///sparring.db``),
    created or migrated to the current schema. Query it with ``storage.queries`` or SQL."""
    from storage.engine import DatabaseError
    from storage.engine import open_store as open_engine

    try:
        return open_engine(database_url or settings().database_url)
    except DatabaseError as exc:
        raise InputError(str(exc)) from exc


def read_only_store(engine: Engine) -> str | None:
    """Why sparring cannot write to the SQLite file of ``engine`` (one line: the file, that it
    is read-only, how to fix it); None when it can, or for other databases. SQLite writes the
    file and, beside it, its ``-wal`` and ``-shm`` files (WAL mode), so both need write access."""
    if engine.dialect.name != "sqlite" or not engine.url.database or engine.url.database.startswith("file:"):
        return None
    path = Path(engine.url.database).resolve()
    how = "log elsewhere with --db sqlite:///other.db"
    if path.exists() and not os.access(path, os.W_OK):
        return f"the SQLite store {path} is read-only: make it writable (chmod u+w {path}) or {how}"
    beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]
    for file in beside:
        if file.exists() and not os.access(file, os.W_OK):
            return f"the SQLite store's {file} is read-only: make it writable (chmod u+w {file}) or {how}"
    if not all(file.exists() for file in beside) and not os.access(path.parent, os.W_OK):
        return (f"the folder of the SQLite store {path} is read-only (SQLite writes its -wal and -shm files "
                f"there): make it writable (chmod u+w {path.parent}) or {how}")
    return None


def require_writable(engine: Engine) -> None:
    """InputError, saying how to fix it, when the store cannot be written."""
    problem = read_only_store(engine)
    if problem is not None:
        raise InputError(problem)


@dataclass(frozen=True)
class StaleWork:
    """What ``clean_up_stale_work`` marked failed."""

    episodes: int
    jobs: int

    def line(self) -> str | None:
        """What was marked, in one line; None when nothing was."""
        if not (self.episodes or self.jobs):
            return None
        return (f"marked as failed what stopped processes left running: {self.episodes} episode(s), "
                f"{self.jobs} training job(s)")


def clean_up_stale_work(engine: Engine) -> StaleWork:
    """Mark failed what processes of this host that are gone (killed, crashed) left running:
    episodes and their runs, training jobs (whose temporary folders are removed). Every call that
    starts work does it first, so leftovers do not wait for some later `play`; a store it cannot
    write is an InputError here."""
    from storage.orphans import mark_orphans
    from training.jobs import fail_stale_jobs

    require_writable(engine)
    return StaleWork(mark_orphans(engine), fail_stale_jobs(engine))


def open_for_work(database_url: str | None, report: Callable[[str], None]) -> Engine:
    """The store at ``database_url`` (``open_store``) with what stopped processes left running
    marked failed (``clean_up_stale_work``) and, when there was some, said in one line through
    ``report``: what every call that starts work does first."""
    engine = open_store(database_url)
    if (stale := clean_up_stale_work(engine).line()) is not None:
        report(stale)
    return engine
