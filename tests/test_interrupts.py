"""Ctrl-C and SIGTERM for the commands' event loops (app/interrupts.py), with real signals."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.interrupts import run_interruptible
from ctrl_c import default_sigint

ROOT = Path(__file__).resolve().parents[1]


def _send_soon(signum: int, after_s: float = 0.05) -> None:
    asyncio.get_running_loop().call_later(after_s, os.kill, os.getpid(), signum)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_cancels_the_work_and_raises_once_its_cleanup_ran(signum, ctrl_c):
    cleaned = []

    async def work():
        _send_soon(signum)
        try:
            await asyncio.sleep(60)
        finally:
            await asyncio.sleep(0)  # cleanup may still await
            cleaned.append(True)

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(work())
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_swallowed_cancellation_still_ends_in_keyboard_interrupt(ctrl_c):
    async def work():
        _send_soon(signal.SIGINT)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:  # a library that eats the cancellation
            pass
        return "finished"

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(work())


def test_a_second_sigterm_does_not_break_the_cleanup_the_first_started():
    cleaned = []

    async def work():
        _send_soon(signal.SIGTERM)
        try:
            await asyncio.sleep(60)
        finally:
            _send_soon(signal.SIGTERM, 0.01)
            await asyncio.sleep(0.2)
            cleaned.append(True)

    with pytest.raises(KeyboardInterrupt):
        run_interruptible(work())
    assert cleaned == [True]


def test_an_ignored_sigint_stays_ignored():
    """Worker processes ignore SIGINT (their parent forwards Ctrl-C): it must not stop them."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        async def work():
            _send_soon(signal.SIGINT)
            await asyncio.sleep(0.2)
            return 7

        assert run_interruptible(work()) == 7
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_sigint_caught_by_another_thread_still_stops_an_idle_loop():
    """The failure this module exists for: the kernel hands SIGINT to a non-main thread (here
    one that sends it to itself) while the event loop waits with nothing to do. asyncio.run
    alone waits out the hour; run_interruptible stops at once. In a subprocess, so that a
    regression fails this test instead of hanging the suite."""
    script = textwrap.dedent("""
        import asyncio, signal, threading, time
        from app.interrupts import run_interruptible

        def poke():
            time.sleep(0.2)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)

        async def work():
            threading.Thread(target=poke).start()
            try:
                await asyncio.sleep(3600)
            finally:
                print("cleanup ran", flush=True)

        try:
            run_interruptible(work())
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          preexec_fn=default_sigint)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cleanup", "ran", "interrupted"]
