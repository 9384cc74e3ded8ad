"""A free loopback port for a test server, and a real uvicorn server for an ASGI app on one, in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serving(app, *, start_within_s: float = 30) -> Iterator[int]:  # noqa: ANN001 (any ASGI app)
    """Serve ``app`` on 127.0.0.1 until the block ends; yields the port."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_within_s
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, f"uvicorn did not start within {start_within_s:.0f} s"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)
