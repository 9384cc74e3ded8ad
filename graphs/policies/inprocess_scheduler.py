"""The in-process backend's worker thread: what runs next, and when queued requests join a
running batch.

Requests that arrive while no batch runs are gathered into a new one (up to
``max_batch_size``, waiting ``batch_wait_s`` for more). Requests that arrive while a batch
runs join it between two decode steps once enough of them can (``join_rows``) or the oldest
has waited long enough (``join_wait_steps``). A control (adapter loading and unloading) is a
barrier: it runs once no batch runs, and no request queued behind it joins the batch running
before it; a control marked ``between_steps`` (a choice pass) may run between two decode
steps instead. Requests and controls whose caller has gone are dropped before they run.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from typing import Any

from graphs.policies.base import BackendError
from graphs.policies.inprocess_batches import BatchRunner, Running
from graphs.policies.inprocess_queue import STOP, Control, Pending, abandoned, deliver

JOIN_ROWS_DIVISOR = 8
JOIN_WAIT_STEPS = 4
"""Join policy defaults (see ``InProcessBackend.__init__``): join when max_batch_size / 8 rows
can (all free rows, if fewer), or once the oldest queued request has waited 4 steps. A join
costs one extra forward pass (the joiners' prefill, whose fixed cost is that of a whole
decode step on CPU) and a copy of the whole KV cache (the merge: about as much as the
concatenation every decode step already does); a free row wastes 1/64 of a step per step.
So a join waits for a few rows to share it, but never long: an episode's next turn waits
behind it. Chosen by this cost argument; not yet tuned on the bundled model (its bench was
not run on a quiet machine), see bench/play_throughput.py --join-rows/--join-wait-steps."""

Waiting = deque[tuple[int, Any]]
"""Items taken off the queue and not run yet, in order, with the decode step they were taken
at. A control or stop is a barrier: no request behind it joins a running batch."""


class Scheduler:
    """Takes work off the queue on its own thread and runs it with a ``BatchRunner``."""

    def __init__(
        self,
        runner: BatchRunner,
        *,
        name: str,
        max_batch_size: int,
        batch_wait_s: float,
        join_rows: int,
        join_wait_steps: int,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.join_rows = join_rows
        self.join_wait_steps = join_wait_steps
        self._runner = runner
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def put(self, item: Pending | Control) -> None:
        self._queue.put(item)

    async def stop(self) -> None:
        """Stop the worker once the batch it is running finishes; what is queued then fails."""
        self._queue.put(STOP)
        await asyncio.to_thread(self._thread.join)
        while True:
            try:
                _fail([self._queue.get_nowait()])
            except queue.Empty:
                return

    def _work(self) -> None:
        waiting: Waiting = deque()
        running: Running | None = None
        while True:
            if running is not None:
                self._take_queued(waiting)
                _drop_abandoned(waiting)
                self._run_between_steps(running, waiting)
                running = self._runner.advance(running, self._admit(running, waiting))
                continue
            item = waiting.popleft()[1] if waiting else self._queue.get()
            if item is STOP:
                _fail([i for _, i in waiting])
                return
            if isinstance(item, Control):
                _run_control(item)
                continue
            running = self._runner.start(self._gather(item, waiting))

    def _gather(self, first: Pending, waiting: Waiting) -> list[Pending]:
        """``first`` and the requests behind it, waiting up to ``batch_wait_s`` for more."""
        batch = [first]
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.max_batch_size:
            if waiting:
                if not isinstance(waiting[0][1], Pending):
                    break
                batch.append(waiting.popleft()[1])
                continue
            wait = deadline - time.monotonic()
            try:
                more = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if not isinstance(more, Pending):
                waiting.append((self._runner.stats.decode_steps, more))  # runs after this batch, in order
                break
            if not more.future.cancelled():  # a request whose caller has gone takes no row
                batch.append(more)
        return batch

    def _take_queued(self, waiting: Waiting) -> None:
        while True:
            try:
                waiting.append((self._runner.stats.decode_steps, self._queue.get_nowait()))
            except queue.Empty:
                return

    def _admit(self, running: Running, waiting: Waiting) -> list[Pending]:
        """The queued requests that join the running batch now (see ``join_rows``)."""
        free = self.max_batch_size - len(running.batch.live)
        if free <= 0 or not waiting or not running.batch.joinable:
            return []
        ready = 0
        for _, item in waiting:
            if not isinstance(item, Pending) or ready == free:
                break
            ready += 1
        waited = self._runner.stats.decode_steps - waiting[0][0]
        if ready == 0 or (ready < min(free, self.join_rows) and waited < self.join_wait_steps):
            return []
        return [waiting.popleft()[1] for _ in range(ready)]

    def _run_between_steps(self, running: Running, waiting: Waiting) -> None:
        """Run the controls that may run in a running batch, up to the first barrier. Each sets
        the model up for itself, so the batch's set-up is released first (and made again
        before the next step)."""
        for entry in list(waiting):
            item = entry[1]
            if isinstance(item, Control) and item.between_steps:
                waiting.remove(entry)
                running.switch.release()
                _run_control(item)
            elif not isinstance(item, Pending):
                return


def _run_control(item: Control) -> None:
    if item.future.cancelled():  # its caller has gone (an episode or command stopped): nobody wants it
        return
    try:
        item.run()
    except Exception as exc:  # delivered to the caller, the worker goes on
        deliver(item.loop, item.future, error=exc)
    else:
        deliver(item.loop, item.future, value=None)


def _drop_abandoned(waiting: Waiting) -> None:
    """Forget the queued requests and controls whose caller has gone (an episode stopped, a
    command was interrupted), so that none is admitted to the running batch, takes a free row
    or runs a forward pass of its own."""
    kept = [entry for entry in waiting if not abandoned(entry[1])]
    if len(kept) < len(waiting):
        waiting.clear()
        waiting.extend(kept)


def _fail(items: list[Any]) -> None:
    for item in items:
        if isinstance(item, (Pending, Control)):
            deliver(item.loop, item.future, error=BackendError("the in-process backend was closed"))
