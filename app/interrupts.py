"""Run a command's event loop so that Ctrl-C and SIGTERM stop it cleanly, every time.

``asyncio.run`` turns Ctrl-C into a cancellation through a Python-level signal handler, which
runs only once the main thread notices the pending signal. When the kernel hands the signal
to another thread (the in-process backend's, busy in a forward pass) while the event loop
waits with nothing scheduled, nothing notices it until something else wakes the loop
(tests/test_interrupts.py reproduces an hour's wait). Here the event loop itself receives
the signals (``loop.add_signal_handler`` delivers them through its wakeup fd, whichever
thread the kernel interrupted), cancels the command's work, and KeyboardInterrupt is raised
once the work has unwound, its ``finally`` blocks run (Terminated, a KeyboardInterrupt, for
SIGTERM). ``sigterm_as_interrupt`` does the same for synchronous work such as training
(``training.signals``, where Terminated lives so that training code raises it too; a retrain's
trainer process is stopped that way by ``training.isolated``). A command ends on either with
``exit_when_stopped``: a message on stderr, then exit 130 on Ctrl-C and 143 on SIGTERM, as
shells report them. A second Ctrl-C stops at once; a repeated SIGTERM is ignored so that the
cleanup it asked for can finish. A SIGINT that the process inherited as ignored (a background
job of a shell without job control) stays ignored.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console

from training.signals import Terminated, raised_in_block

T = TypeVar("T")


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The shell's code for a command stopped by this signal: 143 for SIGTERM, 130 for Ctrl-C."""
    return 143 if isinstance(interrupt, Terminated) else 130


def interruption(signum: int) -> KeyboardInterrupt:
    """What a command raises once the work that ``signum`` (SIGINT or SIGTERM) stopped has unwound."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


@contextmanager
def exit_when_stopped(message: str) -> Iterator[None]:
    """How every command ends on Ctrl-C or SIGTERM: a KeyboardInterrupt (Terminated for SIGTERM)
    out of the block, raised once the work has unwound and marked what it left, prints
    ``message`` on stderr (what was kept, what was marked) and exits 130, or 143 for SIGTERM."""
    try:
        yield
    except KeyboardInterrupt as stop:
        Console(stderr=True).print(message, highlight=False)
        raise typer.Exit(exit_code(stop)) from None


def sigterm_as_interrupt() -> AbstractContextManager[None]:
    """Within the block (synchronous work on the main thread, e.g. training), SIGTERM raises
    Terminated, so that the ``finally`` and ``except BaseException`` cleanups run as on Ctrl-C
    (a repeated SIGTERM is ignored while they run)."""
    return raised_in_block(signal.SIGTERM)


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
            raise interruption(received[0]) from None
        raise
    finally:
        for signum in watched:
            loop.remove_signal_handler(signum)
    if received:
        raise interruption(received[0])
    return result
