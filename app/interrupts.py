"""Run a command's event loop so that Ctrl-C and SIGTERM stop it cleanly, every time.

``asyncio.run`` turns Ctrl-C into a cancellation through a Python-level signal handler, which
runs only once the main thread notices the pending signal. When the kernel hands the signal
to another thread (the in-process backend's, busy in a forward pass) while the event loop
waits with nothing scheduled, nothing notices it until something else wakes the loop
(tests/test_interrupts.py reproduces an hour's wait). Here the event loop itself receives
the signals (``loop.add_signal_handler`` delivers them through its wakeup fd, whichever
thread the kernel interrupted), cancels the command's work, and KeyboardInterrupt is raised
once the work has unwound, its ``finally`` blocks run. A second Ctrl-C stops at once; a
repeated SIGTERM is ignored so that the cleanup it asked for can finish. A SIGINT that the
process inherited as ignored (a background job of a shell without job control) stays ignored.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_interruptible(work: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(work)``; Ctrl-C or SIGTERM cancels ``work`` and raises KeyboardInterrupt
    after it has unwound (also if something inside swallowed the cancellation).

    SIGINT is left alone where it is not Python's default handler (``sparring play``'s
    worker processes ignore it: Ctrl-C reaches them through their parent).
    """
    watched = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # asyncio.run replaces it: look first
        watched.append(signal.SIGINT)
    return asyncio.run(_guarded(work, watched))


async def _guarded(work: Coroutine[Any, Any, T], watched: list[signal.Signals]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if received:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: leave the loop now
            return
        received.append(signum)
        task.cancel()

    for signum in watched:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        result = await task
    except asyncio.CancelledError:
        if received:
            raise KeyboardInterrupt from None
        raise
    finally:
        for signum in watched:
            loop.remove_signal_handler(signum)
    if received:
        raise KeyboardInterrupt
    return result
