"""Ctrl-C and SIGTERM raised in the work they stop: KeyboardInterrupt for Ctrl-C, ``Terminated``
(a KeyboardInterrupt too) for SIGTERM, so that the same ``finally`` and ``except BaseException``
cleanups run for both and a command can still tell them apart (``app.interrupts`` exits 130 or
143, as shells report them). Here, below ``app``, so that training code raises them as well.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn


class Terminated(KeyboardInterrupt):
    """SIGTERM, stopping the work as Ctrl-C does (a command then exits 143, not 130)."""


@contextmanager
def raised_in_block(*signums: signal.Signals) -> Iterator[None]:
    """Within the block, each of ``signums`` (SIGINT, SIGTERM) raises KeyboardInterrupt, or
    Terminated for SIGTERM, in the main thread at once, whatever handled it before (an event
    loop's handler would act only once the block returns: after a whole training). A repeated
    SIGTERM is ignored so that the cleanup it asked for can finish. A signal the process ignores
    (inherited so) stays ignored; off the main thread, where Python runs no signal handler,
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in signums}
    caught = [signum for signum, handler in previous.items() if handler not in (signal.SIG_IGN, None)]
    for signum in caught:
        signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum in caught:
            signal.signal(signum, previous[signum])


def _raise(signum: int, _frame: object) -> NoReturn:
    if signum == signal.SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated
    raise KeyboardInterrupt
