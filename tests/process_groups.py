"""Stopping a server a test started in a session of its own (``start_new_session=True``)."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(process: subprocess.Popen, *, grace_s: float) -> None:
    """SIGTERM to the process group ``process`` leads (a server and the processes it started),
    SIGKILL to it after ``grace_s`` seconds."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
