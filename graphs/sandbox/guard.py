"""A Python audit hook (PEP 578) inside the sandbox: it notes what the code tried that a
sandbox forbids, and denies it itself where no kernel layer does. Standard library only.

What it notes: a write, removal or creation outside the working directory (``filesystem``),
any socket (``network``), a new process (``processes``: allowed, but a failed fork after one is
the process limit). When the kernel confines the sandbox (Landlock, seccomp, a network
namespace, RLIMIT_NPROC), the hook only notes, so the runner can say why a test failed; in
degraded mode it raises PermissionError for the kinds the kernel cannot stop, and also refuses
``ctypes`` (which would call the C library past the hook). An audit hook is a speed bump for
code that does not try to get around it, not a boundary: code can reach the C library through
other modules, and nothing in one process is safe from code running in it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {  # event -> positions of its path arguments
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "shutil.rmtree": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
}
_SOCKET_EVENTS = ("socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.getaddrinfo")
_PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                   "subprocess.Popen", "os.startfile")
_DEVICES = ("/dev/null",)
_NATIVE = ("ctypes", "_ctypes")


@dataclass
class Guard:
    workdir: str
    deny: frozenset[str] = frozenset()
    """the kinds the hook denies itself (degraded mode): filesystem, network, processes, and
    native (importing ctypes) when it stands in for a kernel layer"""
    attempts: list[tuple[str, str]] = field(default_factory=list)
    """(kind, what) noted since the last ``take``"""

    def install(self) -> None:
        if "native" in self.deny:  # imported already (by the runner): forget them, so importing them is seen
            for name in (*_NATIVE, "confine"):
                sys.modules.pop(name, None)
        sys.addaudithook(self)

    def take(self) -> list[tuple[str, str]]:
        taken, self.attempts = self.attempts, []
        return taken

    def __call__(self, event: str, args: tuple) -> None:
        noted = self._classify(event, args)
        if noted is None:
            return
        kind, what = noted
        self.attempts.append(noted)
        if kind in self.deny:
            raise PermissionError(f"sandbox: {what} denied ({kind})")

    def _classify(self, event: str, args: tuple) -> tuple[str, str] | None:
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing and isinstance(path, str | bytes) and self._outside(path):
                return "filesystem", f"open({os.fsdecode(path)!r}, {mode or 'flags'!r})"
        elif event in _PATH_EVENTS:
            paths = [args[i] for i in _PATH_EVENTS[event] if i < len(args)]
            outside = [p for p in paths if isinstance(p, str | bytes) and self._outside(p)]
            if outside:
                return "filesystem", f"{event}({os.fsdecode(outside[0])!r})"
        elif event in _SOCKET_EVENTS:
            return "network", f"{event}{_short(args)}"
        elif event in _PROCESS_EVENTS:
            return "processes", event
        elif event == "import" and args[0] in _NATIVE and "native" in self.deny:
            return "native", f"import {args[0]}"
        return None

    def _outside(self, path: str | bytes) -> bool:
        real = os.path.realpath(os.fsdecode(path))
        return real not in _DEVICES and os.path.commonpath([real, self.workdir]) != self.workdir


def _short(args: Iterable[object]) -> str:
    text = "(" + ", ".join(repr(a) for a in args if not hasattr(a, "fileno")) + ")"
    return text if len(text) <= 80 else text[:77] + "...)"
