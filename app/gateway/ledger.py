"""The gateway's writes: an answer is sent only for records that are in the store, and a store
that goes away costs the requests made while it is away, never the gateway.

The Recorder writes off the request path; the ledger waits for it (``flush``) before a request
that wrote is answered, so a 2xx names records that are stored, and a 503 says the store could
not take them. A Recorder whose store failed takes nothing more (``storage.recorder``): the
ledger then starts a fresh one, so that once the database is back the next request is written,
without restarting the gateway. Each failure counts as an *outage*: records in flight then may
be lost, so the Book compares the episodes it holds with the store before it writes to them
again (``Book._settle``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from sqlalchemy import Engine

from app.gateway.errors import store_unreachable
from storage.engine import DatabaseError
from storage.recorder import Recorder
from storage.records import EpisodeEnd, EpisodeStart, JudgmentRecord, RewardRecord, TurnRecord

SINKS: dict[type, Callable[[Recorder, Any], None]] = {
    EpisodeStart: Recorder.episode_started, TurnRecord: Recorder.turn, RewardRecord: Recorder.reward,
    JudgmentRecord: Recorder.judgment, EpisodeEnd: Recorder.episode_finished}


class Ledger:
    """The Recorder the gateway writes through, replaced after each outage."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.recorder = Recorder(engine)
        self.outages = 0
        """how many times the store failed a write since the gateway started"""

    async def commit(self, *records: Any) -> None:
        """Send ``records`` in order and wait until the store has them, with everything sent
        before (with none: just wait). A GatewayError 503 when the store cannot take them."""
        recorder = self.recorder
        try:
            for record in records:
                SINKS[type(record)](recorder, record)
            await asyncio.to_thread(recorder.flush)
        except DatabaseError as exc:
            await self._replace(recorder)
            raise store_unreachable(exc) from exc

    def close(self) -> None:
        self.recorder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def _replace(self, failed: Recorder) -> None:
        """A fresh Recorder instead of ``failed`` (once, however many requests saw it fail)."""
        if self.recorder is not failed:
            return
        self.recorder = Recorder(self.engine)
        self.outages += 1
        await asyncio.to_thread(_close_failed, failed)


def _close_failed(recorder: Recorder) -> None:
    """Stop a failed Recorder's writer; its failure was reported to the requests that met it."""
    try:
        recorder.close()
    except DatabaseError:
        pass
