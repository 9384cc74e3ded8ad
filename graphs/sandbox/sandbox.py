"""Run model-written code against its tests in a sandbox, and judge what happened outside it."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Literal

from graphs.sandbox import workdir as folders
from graphs.sandbox.cgroup import RunGroup
from graphs.sandbox.limits import Limits, Mode
from graphs.sandbox.probe import BOOT, HERE, PYTHON_FLAGS, Layers, probe
from graphs.sandbox.probes import Probe
from graphs.sandbox.probes import probe as probe_of
from graphs.sandbox.result import RunResult
from graphs.sandbox.verdict import Execution, SandboxError, judge, lines

_REPORT_BYTES = 1 << 20
"""the most of each channel the parent reads: a flood past it is cut, and the run is over"""
_OUTPUT_CHARS = 2000
_POLL_S = 0.05
"""how often the parent measures the working folder while the code runs"""
_SYSTEM_FOLDERS = ("/usr", "/lib", "/lib64", "/bin", "/etc")
"""reads ``system``: where the code may read and execute, besides the Python installation"""
_JOIN_CGROUP = 'echo $$ > "$0" && unset PWD OLDPWD && exec "$@"'
"""the shell that puts the run's first process in its cgroup before anything of it runs"""

Reads = Literal["python", "system"]

__all__ = ["Reads", "Sandbox", "SandboxError", "SandboxUnavailable"]


class SandboxUnavailable(RuntimeError):
    """This machine cannot give the sandbox its strict guarantees, or cannot start it at all."""


class Sandbox:
    """Runs code and its tests in a separate, confined process (see ``graphs.sandbox``).

    ``run`` blocks; call it through ``asyncio.to_thread`` from a game. Whatever the code does,
    ``run`` returns a ``RunResult`` saying so, and its working folder and cgroup are removed;
    only a failure of the sandbox itself, reported before the code ran, raises."""

    def __init__(self, limits: Limits | None = None, mode: Mode | str = Mode.STRICT, *,
                 layers: Layers | None = None, reads: Reads = "python") -> None:
        """``layers``: what to confine runs with (default: all this machine offers, ``probe()``);
        fewer stand for a machine without some of them. ``reads``: with Landlock, what the code
        may read: ``python`` (the standard library without installed packages, the libraries
        the interpreter needs, /bin and /usr/bin) or ``system`` (/usr, /lib, /bin, /etc)."""
        self.limits = limits or Limits()
        self.mode = Mode(mode)
        self.layers = layers or probe()
        self.reads = reads
        if self.layers.startable is not None:
            raise SandboxUnavailable(f"the sandbox cannot start its interpreter: {self.layers.startable}")
        missing = self.layers.missing()
        if missing and self.mode == Mode.STRICT:
            raise SandboxUnavailable(
                "the sandbox cannot confine model-written code here: " + "; ".join(
                    f"{kind}: {why}" for kind, why in missing.items())
                + ". Run on a machine that has these, or choose degraded mode (--sandbox degraded), where a Python "
                "audit hook denies them instead (weaker: code that goes around the hook is not stopped)")
        self.deny = frozenset(missing) | ({"native"} if missing.keys() & {"filesystem", "network"} else set())
        self.processes = (self.limits.processes if self.layers.cgroup
                          else self.limits.processes_within(self.limits.run_memory_mb))

    def describe(self) -> tuple[str, ...]:
        """What confines a run here, one entry per layer."""
        limits = self.limits
        layers = ["process: own session, minimal environment, fresh working directory",
                  "rlimits: cpu, address space, file size, processes"]
        if self.layers.cgroup:
            layers.append(f"memory: cgroup, {limits.run_memory_mb} MiB for the whole run")
        else:
            layers.append(f"memory: no cgroup here; {self.processes} processes + 2 x {limits.memory_mb} MiB, within "
                          f"{limits.run_memory_mb} MiB for the whole run")
        layers.append(f"disk: {limits.disk_mb:g} MiB and {limits.files} files in the working directory (measured "
                      f"every {_POLL_S:g} s)")
        if self.layers.drop_to is not None:
            layers.append(f"uid {self.layers.drop_to} (not root)")
        if self.layers.namespaces:
            layers.append("namespaces: user, network, pid")
        if self.layers.landlock_abi:
            reads = "the standard library and what it needs" if self.reads == "python" else "system folders"
            layers.append(f"landlock abi {self.layers.landlock_abi}: writes only in the working directory, reads "
                          f"only of {reads}")
        if self.layers.seccomp:
            layers.append("seccomp: no sockets")
        layers.append(f"audit hook: denies {', '.join(sorted(self.deny))}" if self.deny else "audit hook: notes")
        return tuple(layers)

    def run(self, code: str, tests: Sequence[str], reference: str | None = None) -> RunResult:
        """Run ``code`` against ``tests`` and judge it outside the run. ``reference``: a correct
        solution, run apart on the tests that are not ``assert X == literal`` so that their
        verdict compares values too (without it, their checks say ``trusted=False``)."""
        tests = list(tests)
        probes = [probe_of(test) for test in tests]
        traced = reference is not None and any(p.kind == "trace" for p in probes)
        expected = self._execute(reference, probes) if traced and reference is not None else None
        return judge(self._execute(code, probes), tests, probes, self.limits, self.describe(), expected)

    def _execute(self, code: str, probes: list[Probe]) -> Execution:
        started = time.monotonic()
        workdir = tempfile.mkdtemp(prefix="sparring-sandbox-")
        report_read, report_write = os.pipe()
        observe_read, observe_write = os.pipe()
        group = self._group()
        try:
            if self.layers.drop_to is not None:
                os.chown(workdir, self.layers.drop_to, self.layers.drop_to)
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                try:
                    process = subprocess.Popen(
                        self._command(group), stdin=subprocess.PIPE, stdout=out, stderr=err,
                        pass_fds=(report_write, observe_write), cwd=workdir, env=_environment(workdir),
                        start_new_session=True)
                finally:
                    os.close(report_write)
                    os.close(observe_write)
                self._send(process, self._job(workdir, code, probes, report_write, observe_write))
                run = self._collect(process, report_read, observe_read, workdir, started + self.limits.wall_s)
                run.oom_killed = group is not None and group.oom_killed()
                run.stdout = _tail(out)
            run.wall_s = time.monotonic() - started
            return run
        finally:
            os.close(report_read)
            os.close(observe_read)
            if group is not None:
                group.close()
            folders.remove(workdir)

    def _group(self) -> RunGroup | None:
        if not self.layers.cgroup:
            return None
        try:
            return RunGroup(Path(self.layers.cgroup), self.limits.run_memory_mb)
        except OSError as exc:
            raise SandboxError(f"could not make the run's memory cgroup under {self.layers.cgroup}: {exc}") from exc

    def _command(self, group: RunGroup | None) -> list[str]:
        command = [*self.layers.prefix(), self.layers.python, *PYTHON_FLAGS, "-c", BOOT]
        return command if group is None else ["/bin/sh", "-c", _JOIN_CGROUP, str(group.procs), *command]

    def _job(self, workdir: str, code: str, probes: list[Probe], report_fd: int, observe_fd: int) -> dict[str, Any]:
        limits = {"cpu_s": self.limits.cpu_s, "memory_mb": self.limits.memory_mb,
                  "file_size_mb": self.limits.file_size_mb, "processes": self.processes}
        if self.reads == "python":
            readable = set(self.layers.python_reads)
        else:
            readable = {*self.layers.python_paths, *(os.path.realpath(p) for p in _SYSTEM_FOLDERS)}
        return {"workdir": os.path.realpath(workdir), "code": code, "probes": [p.job() for p in probes],
                "report_fd": report_fd, "observe_fd": observe_fd, "harness": str(HERE),
                "limits": limits, "own_user_namespace": self.layers.namespaces,
                "landlock_abi": self.layers.landlock_abi, "readable": sorted(readable),
                "seccomp": self.layers.seccomp, "deny": sorted(self.deny)}

    @staticmethod
    def _send(process: subprocess.Popen, job: dict[str, Any]) -> None:
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps(job).encode())
            process.stdin.close()
        except BrokenPipeError:  # it died at start: the report says nothing, and the run is judged crashed
            pass

    def _collect(self, process: subprocess.Popen, report_fd: int, observe_fd: int, workdir: str,
                 deadline: float) -> Execution:
        """Both channels, read until the supervisor closes its report or the run passes its
        wall clock or its disk bound; then every process of the run is killed (its group; in a
        PID namespace, all of it)."""
        data = {report_fd: b"", observe_fd: b""}
        open_fds = set(data)
        timed_out, disk = False, None
        next_measure = time.monotonic()
        with selectors.DefaultSelector() as selector:
            for fd in data:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            while report_fd in open_fds and all(len(chunk) < _REPORT_BYTES for chunk in data.values()):
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if now >= next_measure:
                    disk = self._over_disk(workdir)
                    if disk is not None:
                        break
                    next_measure = now + _POLL_S
                ended = process.poll() is not None
                ready = selector.select(min(deadline - now, _POLL_S))
                for key, _ in ready:
                    chunk, closed = _read(key.fd)
                    data[key.fd] += chunk
                    if closed:
                        open_fds.discard(key.fd)
                        selector.unregister(key.fd)
                if not ready and ended:
                    break
        for fd in data:
            data[fd] += _read(fd)[0]
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        if disk is None:
            disk = self._over_disk(workdir)
        return Execution(lines(data[report_fd][:_REPORT_BYTES]), lines(data[observe_fd][:_REPORT_BYTES]),
                         timed_out, disk)

    def _over_disk(self, workdir: str) -> str | None:
        used = folders.usage(workdir, most_files=self.limits.files)
        if used.files > self.limits.files:
            return f"more than {self.limits.files} files"
        if used.bytes > self.limits.disk_mb * (1 << 20):
            return f"more than {self.limits.disk_mb:g} MiB"
        return None


def _environment(workdir: str) -> dict[str, str]:
    """The whole environment of the code: nothing inherited, so no key or token can leak."""
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}


def _read(fd: int) -> tuple[bytes, bool]:
    """What the pipe holds now, and whether every writer has closed it."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return b"".join(chunks), False
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


def _tail(file: IO[bytes]) -> str:
    file.seek(0, os.SEEK_END)
    size = file.tell()
    file.seek(max(0, size - _OUTPUT_CHARS))
    return file.read().decode(errors="replace")
