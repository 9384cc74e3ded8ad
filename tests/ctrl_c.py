"""Ctrl-C as a terminal delivers it, whatever started the test run.

A shell without job control starts a background command with SIGINT ignored, and every child
inherits that (`nohup .ci/run &` does it): sparring then rightly ignores Ctrl-C, as any
program started that way does. Tests about Ctrl-C therefore set it up as a terminal would.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


def default_sigint() -> None:
    """``preexec_fn`` of a child process that a test sends SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler in this process for the test's duration."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
