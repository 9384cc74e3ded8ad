"""A memory cgroup per sandboxed run, where this process may make one: every process of the run
counts against one memory bound, and past it the kernel kills inside the run only.

Works with cgroup v2 (``memory.max``, ``memory.events``, ``cgroup.kill``) and v1
(``memory.limit_in_bytes``, ``memory.oom_control``), beneath the cgroup this process is in. A
machine where no child cgroup can be made (no permission, no memory controller delegated)
has none; ``graphs.sandbox.limits`` then bounds memory by processes x address space instead.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

_ROOT = Path("/sys/fs/cgroup")


def parent() -> Path | None:
    """The memory cgroup under which runs get their own (None: not possible here)."""
    for candidate in _candidates():
        probe = candidate / f"sparring-probe-{uuid.uuid4().hex[:8]}"
        try:
            probe.mkdir()
        except OSError:
            continue
        try:
            if _limit_file(probe) is not None:
                return candidate
        finally:
            _rmdir(probe)
    return None


def _candidates() -> list[Path]:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (_ROOT / "cgroup.controllers").exists():
            found.append(_ROOT / path.lstrip("/"))
        elif "memory" in controllers.split(","):
            found.append(_ROOT / "memory" / path.lstrip("/"))
    return found


def _limit_file(group: Path) -> Path | None:
    for name in ("memory.max", "memory.limit_in_bytes"):
        if (group / name).exists():
            return group / name
    return None


class RunGroup:
    """One run's cgroup: made with its bound, joined by the run's first process (``procs``),
    asked whether the kernel killed for memory, emptied and removed at ``close``."""

    def __init__(self, under: Path, memory_mb: int) -> None:
        self.path = under / f"sparring-run-{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        limit = _limit_file(self.path)
        if limit is None:
            _rmdir(self.path)
            raise OSError(f"{self.path}: no memory controller")
        limit.write_text(str(memory_mb << 20))
        for swap in ("memory.swap.max", "memory.memsw.limit_in_bytes"):
            if (self.path / swap).exists():
                try:
                    (self.path / swap).write_text("0" if swap == "memory.swap.max" else str(memory_mb << 20))
                except OSError:
                    pass
        self.procs = self.path / "cgroup.procs"

    def oom_killed(self) -> bool:
        for name in ("memory.events", "memory.oom_control"):
            try:
                for line in (self.path / name).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
            except (OSError, ValueError):
                continue
        return False

    def close(self) -> None:
        """Kill whatever is left in the group, then remove it (never raises)."""
        for _ in range(50):
            pids = self._pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
        for _ in range(50):
            if _rmdir(self.path):
                return
            time.sleep(0.01)

    def _pids(self) -> list[int]:
        try:
            return [int(pid) for pid in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
