"""The recorder: a RecordSink that writes records in batches on one background thread.

Sink methods only enqueue, so the asyncio game code never waits on the database. The writer
thread takes records in enqueue order, up to ``batch_size`` at a time (or what arrived within
``flush_interval_s`` of the first), and commits each batch in one transaction: bulk inserts
in foreign-key order (an episode that also ends in the batch is inserted ended), then the
other EpisodeEnds of the batch as UPDATEs. An EpisodeEnd is thus never committed before a
record enqueued ahead of it, and an episode whose end was not recorded stays ``running``
(``abort_running`` and ``mark_orphans`` mark those as failed). Under a backlog, batches are
full: ``batch_size`` bounds how many records one transaction holds, and fewer, larger
commits are what let the writer keep up (bench/store_ingest.py).

A batch the store refuses (after retrying transient errors) costs no other episode: it is
written again with text the store cannot hold made storable (``storage.storable``: a NUL in a
task or a model reply), then, if still refused, episode by episode. An episode whose own
records are refused is marked failed (error_stage "recorder", the driver's error) and its
later records are dropped; the others are written. Only when the store takes nothing at all
(not even that mark) does the writer stop: nothing after it is written, and the failure is
raised as a DatabaseError by ``flush``, ``close`` and every later sink call.
"""

from __future__ import annotations

import atexit
import threading
import time
from dataclasses import dataclass, replace
from queue import Empty, SimpleQueue
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Engine, insert, update

from storage.engine import DatabaseError, driver_message, in_transaction
from storage.models import RunStatus
from storage.orphans import fail_running_episodes, mark_orphans
from storage.records import (
    EpisodeEnd,
    EpisodeStart,
    EpisodeStatus,
    JudgmentRecord,
    RewardRecord,
    RunRecord,
    TurnRecord,
    utcnow,
)
from storage.redact import redact
from storage.rows import episode_of, fail_unstored, to_rows, write_rows
from storage.storable import storable
from storage.tables import EPISODES
from storage.tables import RUNS as _RUNS

__all__ = ["NullRecorder", "Recorder", "RecorderStats", "mark_orphans"]

_STOP = object()
_FINISHED_RUN_STATUSES = frozenset(RunStatus) - {RunStatus.RUNNING}


@dataclass
class RecorderStats:
    records: int = 0
    """records committed"""
    rows: int = 0
    """rows inserted or updated"""
    batches: int = 0
    """transactions committed"""
    seconds: float = 0.0
    """time the writer spent converting and writing (not waiting for records)"""
    dropped: int = 0
    """records not written: the writer had failed, or their episode's records were refused"""
    lost_episodes: int = 0
    """episodes marked failed because the store refused their records"""


class Recorder:
    """Batched, ordered, non-blocking writer of game records into the store."""

    def __init__(self, engine: Engine, *, batch_size: int = 4096, flush_interval_s: float = 0.05) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if flush_interval_s < 0:
            raise ValueError(f"flush_interval_s must be >= 0, got {flush_interval_s}")
        self._engine = engine
        self._batch_size = batch_size
        self._flush_interval_s = flush_interval_s
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._stats = RecorderStats()
        self._failure: DatabaseError | None = None
        self._refused: set[str] = set()
        """episodes marked failed because the store refused their records: the rest are dropped"""
        self._closed = False
        self._thread = threading.Thread(target=self._run_writer, name="sparring-recorder", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # a forgotten close() must not lose the queued records

    # --- RecordSink ---------------------------------------------------------------------

    def episode_started(self, record: EpisodeStart) -> None:
        self._put(record)

    def turn(self, record: TurnRecord) -> None:
        self._put(record)

    def reward(self, record: RewardRecord) -> None:
        self._put(record)

    def judgment(self, record: JudgmentRecord) -> None:
        self._put(record)

    def episode_finished(self, record: EpisodeEnd) -> None:
        EpisodeStatus(record.status)  # a bad status fails here, in the caller, not in the writer
        self._put(record)

    # --- runs and lifecycle -----------------------------------------------------------------

    def start_run(self, run: RunRecord) -> None:
        """Insert the run now (synchronously), with status ``running``."""
        row = {
            "id": run.id,
            "game": run.game,
            "config": run.config,
            "seed": run.seed,
            "host": run.host,
            "pid": run.pid,
            "status": RunStatus.RUNNING.value,
            "summary": None,
            "started_at": run.started_at,
            "finished_at": None,
            "parent_id": run.parent_id,
        }
        in_transaction(self._engine, lambda conn: conn.execute(insert(_RUNS), row))

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        """Flush, then record the run's end. If the flush fails, the run is recorded as
        ``failed`` with the error in its summary, and the error is raised. A summary's error is
        stored with keys and passwords masked (storage.redact)."""
        if status not in _FINISHED_RUN_STATUSES:
            raise ValueError(f"status must be one of {', '.join(sorted(_FINISHED_RUN_STATUSES))}; got {status!r}")
        failure = self._flush_for_sync_write()
        if failure is not None:
            status, summary = RunStatus.FAILED.value, {**summary, "error": str(failure)}
        if isinstance(summary.get("error"), str):
            summary = {**summary, "error": redact(summary["error"])}
        stmt = update(_RUNS).where(_RUNS.c.id == run_id).values(status=status, summary=summary, finished_at=utcnow())
        in_transaction(self._engine, lambda conn: conn.execute(stmt))
        if failure is not None:
            raise failure

    def abort_running(self, run_id: str, reason: str) -> int:
        """Flush, then mark the run's episodes still ``running`` as failed (error_stage
        "interrupted", error ``reason``); returns how many. Used on Ctrl-C. A flush failure
        is raised after the marking."""
        failure = self._flush_for_sync_write()
        marked = in_transaction(
            self._engine, lambda conn: fail_running_episodes(conn, EPISODES.c.run_id == run_id, reason)
        )
        if failure is not None:
            raise failure
        return marked

    def flush(self) -> None:
        """Block until everything enqueued so far is committed; raise the writer's failure."""
        if not self._closed:
            done = threading.Event()
            self._queue.put(done)
            while not done.wait(0.5):
                if not self._thread.is_alive():
                    break
        self._raise_failure()

    def close(self) -> None:
        """Flush and stop the writer. Idempotent; raises the writer's failure if it had one."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
            self._thread.join()
            atexit.unregister(self.close)
        self._raise_failure()

    @property
    def stats(self) -> RecorderStats:
        return replace(self._stats)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- internals --------------------------------------------------------------------------

    def _put(self, record: object) -> None:
        self._raise_failure()
        if self._closed:
            raise DatabaseError("this Recorder is closed; records sent to it are not saved. Open a new one.")
        self._queue.put(record)

    def _raise_failure(self) -> None:
        """Raise a fresh copy of the writer's failure (re-raising one object grows its traceback)."""
        if self._failure is not None:
            raise DatabaseError(*self._failure.args) from self._failure.__cause__

    def _flush_for_sync_write(self) -> DatabaseError | None:
        try:
            self.flush()
        except DatabaseError as exc:
            return exc
        return None

    def _run_writer(self) -> None:
        try:
            self._drain()
        except BaseException as exc:  # a bug in the writer itself must still surface
            self._failure = self._failure or DatabaseError(f"the recorder's writer thread crashed: {exc!r}")
            raise

    def _drain(self) -> None:
        while True:
            batch, marker = self._take_batch()
            if batch:
                self._write(batch)
            if marker is _STOP:
                return
            if marker is not None:
                marker.set()

    def _take_batch(self) -> tuple[list[Any], Any]:
        """The next records in enqueue order: up to batch_size, or what arrived within
        flush_interval_s of the first. Also the flush or stop marker that cut the batch short."""
        queue, item = self._queue, self._queue.get()
        batch: list[Any] = []
        deadline = time.monotonic() + self._flush_interval_s
        while item is not _STOP and type(item) is not threading.Event:
            batch.append(item)
            if len(batch) >= self._batch_size:
                return batch, None
            try:
                item = queue.get_nowait()
            except Empty:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return batch, None
                try:
                    item = queue.get(timeout=remaining)
                except Empty:
                    return batch, None
        return batch, item

    def _write(self, batch: list[Any]) -> None:
        if self._failure is not None:
            self._stats.dropped += len(batch)
            return
        started = time.perf_counter()
        try:
            if self._refused:
                kept = [r for r in batch if episode_of(r) not in self._refused]
                self._stats.dropped += len(batch) - len(kept)
                batch = kept
            try:
                self._commit(batch)
            except Exception as exc:
                self._salvage(batch, exc)
        finally:
            self._stats.seconds += time.perf_counter() - started

    def _commit(self, batch: list[Any]) -> None:
        if batch:
            rows = to_rows(batch)
            written = in_transaction(self._engine, lambda conn: write_rows(conn, rows))
            self._stats.records += len(batch)
            self._stats.rows += written
            self._stats.batches += 1

    def _salvage(self, batch: list[Any], refusal: Exception) -> None:
        """A refused batch: again with storable text, then episode by episode."""
        batch = [storable(r) for r in batch]
        try:
            self._commit(batch)
            return
        except Exception as exc:
            refusal = exc
        by_episode: dict[str, list[Any]] = {}
        for record in batch:
            by_episode.setdefault(episode_of(record), []).append(record)
        stored_any = False
        for episode_id, records in by_episode.items():
            try:
                self._commit(records)
                stored_any = True
                continue
            except Exception as exc:
                refusal = exc
            if self._mark_refused(episode_id, records, refusal):
                stored_any = True
            elif not stored_any:  # not even the mark: the store itself is failing
                self._stats.dropped += len(batch) - len(records)
                self._failure = DatabaseError(
                    f"the recorder could not save a batch of {len(batch)} records, and saves nothing after "
                    f"it: {driver_message(refusal)}"
                )
                self._failure.__cause__ = refusal
                return

    def _mark_refused(self, episode_id: str, records: list[Any], refusal: Exception) -> bool:
        """Drop the episode's records (and its later ones) and mark it failed; False if the
        mark could not be written."""
        self._refused.add(episode_id)
        self._stats.dropped += len(records)
        start = next((r for r in records if type(r) is EpisodeStart), None)
        error = f"the store refused this episode's records ({driver_message(refusal)}); they are not saved"
        for keep_task in (True, False) if start is not None else (False,):  # the task may be what was refused
            try:
                marked = in_transaction(
                    self._engine, lambda conn: fail_unstored(conn, episode_id, start, error, task=keep_task)
                )
            except Exception:
                continue
            self._stats.lost_episodes += marked
            return True
        return False


class NullRecorder:
    """A Recorder that discards everything: the baseline for measuring logging overhead."""

    def episode_started(self, record: EpisodeStart) -> None:
        pass

    def turn(self, record: TurnRecord) -> None:
        pass

    def reward(self, record: RewardRecord) -> None:
        pass

    def judgment(self, record: JudgmentRecord) -> None:
        pass

    def episode_finished(self, record: EpisodeEnd) -> None:
        pass

    def start_run(self, run: RunRecord) -> None:
        pass

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        pass

    def abort_running(self, run_id: str, reason: str) -> int:
        return 0

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def stats(self) -> RecorderStats:
        return RecorderStats()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass
