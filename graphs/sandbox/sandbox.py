"""Run model-written code against its tests in a sandbox, and judge what happened."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import IO, Any

from graphs.sandbox.limits import Limits, Mode
from graphs.sandbox.probe import BOOT, PYTHON_FLAGS, Layers, probe
from graphs.sandbox.result import Check, RunResult, Status, Violation

_REPORT_BYTES = 1 << 20
"""the most report the parent reads: a flood past it is cut, and the run is over"""
_OUTPUT_CHARS = 2000
_READABLE = ("/usr", "/lib", "/lib64", "/bin", "/etc")
"""where the code may read and execute, besides the Python installation and its own folder"""


class SandboxUnavailable(RuntimeError):
    """This machine cannot give the sandbox its strict guarantees, or cannot start it at all."""


class SandboxError(RuntimeError):
    """The sandbox itself failed before the code ran (never something the code did)."""


class Sandbox:
    """Runs code and its tests in a separate, confined process (see ``graphs.sandbox``).

    ``run`` blocks; call it through ``asyncio.to_thread`` from a game. Whatever the code does,
    ``run`` returns a ``RunResult`` saying so; only a failure of the sandbox itself raises."""

    def __init__(self, limits: Limits | None = None, mode: Mode | str = Mode.STRICT, *,
                 layers: Layers | None = None) -> None:
        """``layers``: what to confine runs with (default: all this machine offers, ``probe()``);
        fewer stand for a machine without some of them."""
        self.limits = limits or Limits()
        self.mode = Mode(mode)
        self.layers = layers or probe()
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

    def describe(self) -> tuple[str, ...]:
        """What confines a run here, one entry per layer."""
        layers = ["process: own session, minimal environment, fresh working directory",
                  "rlimits: cpu, address space, file size, processes"]
        if self.layers.drop_to is not None:
            layers.append(f"uid {self.layers.drop_to} (not root)")
        if self.layers.namespaces:
            layers.append("namespaces: user, network, pid")
        if self.layers.landlock_abi:
            layers.append(f"landlock abi {self.layers.landlock_abi}: writes only in the working directory")
        if self.layers.seccomp:
            layers.append("seccomp: no sockets")
        layers.append(f"audit hook: denies {', '.join(sorted(self.deny))}" if self.deny else "audit hook: notes")
        return tuple(layers)

    def run(self, code: str, tests: Sequence[str]) -> RunResult:
        started = time.monotonic()
        workdir = tempfile.mkdtemp(prefix="sparring-sandbox-")
        read_end, write_end = os.pipe()
        try:
            if self.layers.drop_to is not None:
                os.chown(workdir, self.layers.drop_to, self.layers.drop_to)
            with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
                try:
                    process = subprocess.Popen(
                        [*self.layers.prefix(), self.layers.python, *PYTHON_FLAGS, "-c", BOOT],
                        stdin=subprocess.PIPE, stdout=out, stderr=err, pass_fds=(write_end,), cwd=workdir,
                        env=_environment(workdir), start_new_session=True)
                finally:
                    os.close(write_end)
                self._send(process, self._job(workdir, code, tests, write_end))
                report, timed_out = _collect(process, read_end, started + self.limits.wall_s)
                stdout = _tail(out)
            return _judge(report, list(tests), self.limits, timed_out, self.describe(), stdout,
                          time.monotonic() - started)
        finally:
            os.close(read_end)
            shutil.rmtree(workdir, ignore_errors=True)

    def _job(self, workdir: str, code: str, tests: Sequence[str], report_fd: int) -> dict[str, Any]:
        limits = {"cpu_s": self.limits.cpu_s, "memory_mb": self.limits.memory_mb,
                  "file_size_mb": self.limits.file_size_mb, "processes": self.limits.processes}
        readable = {*self.layers.python_paths, *(os.path.realpath(p) for p in _READABLE)}
        return {"workdir": os.path.realpath(workdir), "code": code, "tests": list(tests), "report_fd": report_fd,
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


def _environment(workdir: str) -> dict[str, str]:
    """The whole environment of the code: nothing inherited, so no key or token can leak."""
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0", "PYTHONIOENCODING": "utf-8"}


def _collect(process: subprocess.Popen, read_end: int, deadline: float) -> tuple[list[dict[str, Any]], bool]:
    """The report lines, read until the process ends or the deadline passes; then every
    process of the run is killed (its group; in a PID namespace, all of it)."""
    os.set_blocking(read_end, False)
    data, timed_out = b"", False
    with selectors.DefaultSelector() as selector:
        selector.register(read_end, selectors.EVENT_READ)
        while len(data) < _REPORT_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ended = process.poll() is not None
            if selector.select(min(remaining, 0.05)):
                chunk, closed = _read(read_end)
                data += chunk
                if closed:
                    break
            elif ended:
                break
    data += _read(read_end)[0]
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    lines = []
    for raw in data[:_REPORT_BYTES].splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict):
            lines.append(line)
    return lines, timed_out


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


def _judge(report: list[dict[str, Any]], tests: list[str], limits: Limits, timed_out: bool,
           layers: tuple[str, ...], stdout: str, wall_s: float) -> RunResult:
    def result(status: Status, cause: str, violation: Violation | None = None) -> RunResult:
        return RunResult(status, tuple(checks), cause, violation, layers, stdout, round(wall_s, 3))

    internal = next((line["internal"] for line in report if "internal" in line), None)
    lines = {line["test"]: line for line in report if isinstance(line.get("test"), int)}
    if internal is not None and not lines:
        raise SandboxError(f"the sandbox's runner failed before the code ran: {internal}")
    exit_line = next((line for line in report if "exit" in line), {})
    syntax = next((line["syntax_error"] for line in report if "syntax_error" in line), None)
    done = any(line.get("done") for line in report)
    stopped = _stopped(exit_line, timed_out, limits)
    checks = [Check(i, bool(lines[i].get("passed")), lines[i].get("error"), test) if i in lines
              else Check(i, False, f"not run: {_not_run(stopped, syntax)}", test)
              for i, test in enumerate(tests)]
    if stopped is not None:
        return result(Status.VIOLATION, stopped[1], stopped[0])
    if syntax is not None:
        return result(Status.SYNTAX_ERROR, f"the code does not compile: {syntax}")
    violated = next((line for line in lines.values() if line.get("violation")), None)
    if violated is not None:
        kind = Violation(violated["violation"])
        return result(Status.VIOLATION, f"{_DENIED[kind]}: {violated.get('detail')} (test {violated['test'] + 1})",
                      kind)
    if not done:
        how = (f"signal {exit_line['signal']}" if exit_line.get("signal") else f"exit code {exit_line.get('exit')}")
        return result(Status.CRASHED, f"the process ended before its tests finished ({how})")
    passed = sum(check.passed for check in checks)
    if passed == len(checks):
        return result(Status.PASSED, f"all {len(checks)} tests pass")
    first = next(check for check in checks if not check.passed)
    return result(Status.FAILED, f"{passed} of {len(checks)} tests pass; test {first.index + 1} fails")


def _not_run(stopped: tuple[Violation, str] | None, syntax: str | None) -> str:
    if stopped is not None:
        return stopped[1]
    return "the code does not compile" if syntax is not None else "the process ended first"


_DENIED = {
    Violation.MEMORY: "stopped at the memory limit",
    Violation.FILE_SIZE: "stopped at the file-size limit",
    Violation.PROCESSES: "stopped at the process limit",
    Violation.FILESYSTEM: "denied a write outside its directory",
    Violation.NETWORK: "denied network access",
    Violation.NATIVE: "denied native code (degraded mode)",
}


def _stopped(exit_line: dict[str, Any], timed_out: bool, limits: Limits) -> tuple[Violation, str] | None:
    """A limit that ended the run, from the supervisor's account of the worker."""
    if timed_out:
        return Violation.WALL_TIME, f"stopped after {limits.wall_s:g} s of wall-clock time"
    sig, cpu = exit_line.get("signal"), exit_line.get("cpu_s") or 0.0
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= max(1, round(limits.cpu_s)) - 0.05):
        return Violation.CPU_TIME, f"stopped after {cpu:g} s of CPU time (limit {limits.cpu_s:g} s)"
    if sig == signal.SIGXFSZ:
        return Violation.FILE_SIZE, f"stopped at the file-size limit ({limits.file_size_mb:g} MiB)"
    return None
