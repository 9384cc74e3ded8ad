"""What callers queue for the in-process backend's worker thread, and how answers get back.

Callers run on event loops; the worker is a thread. Each queued item carries the caller's
future and loop, and the worker completes the future on that loop (``deliver``). A future the
caller has cancelled (an episode or the command stopped) means nobody wants the work.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graphs.policies.base import GenerationRequest, GenerationResult


@dataclass
class Pending:
    """A generation request waiting for its answer."""

    request: GenerationRequest
    future: asyncio.Future[GenerationResult]
    loop: asyncio.AbstractEventLoop
    submitted: float
    """``time.perf_counter()`` when it was queued: its result's latency counts from here."""


@dataclass
class Control:
    """Work that must not overlap a batch (adapter loading and unloading, a choice pass)."""

    run: Callable[[], None]
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop
    between_steps: bool = False
    """It may also run between two decode steps of a running batch, which then waits for it
    (a constrained choice: one forward pass of its own). It sets the model up for itself.
    Otherwise it waits until no batch runs."""


STOP = object()
"""Queued by ``aclose``: the worker stops, and fails what is queued behind it."""


def abandoned(item: Any) -> bool:
    """Whether ``item`` is a request or control whose caller has gone."""
    return isinstance(item, (Pending, Control)) and item.future.cancelled()


def deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    *,
    value: Any = None,
    error: BaseException | None = None,
) -> None:
    """Complete ``future`` on its own loop (from the worker thread), unless it was cancelled
    or its loop has closed meanwhile."""

    def complete() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits any more
        loop.call_soon_threadsafe(complete)
