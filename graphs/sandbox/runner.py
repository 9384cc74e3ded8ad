"""The program that runs inside the sandbox (standard library only; started by
``graphs.sandbox.sandbox`` as ``python -P -S -B -c``, with this folder on ``sys.path``).

It reads its job from stdin (code, probes, limits, which layers to apply, two pipes), forks a
worker and waits for it. Two channels leave the run:

- the **report** pipe, trusted: the worker writes on it only before the code runs (a syntax
  error, or ``{"internal": msg}`` when confining itself failed) and closes it before the
  code's first line; the supervisor, which never runs the code, then writes the worker's exit
  status and CPU time on it. The code never holds this pipe, so it cannot write a report.
- the **observation** pipe, untrusted: one JSON line per probe, as it goes (a probe that hangs
  leaves the lines before it): ``{"test": i, "value": plain}`` or ``{"test": i, "trace":
  [...]}``, with ``"raised": msg|null``, ``"violation": kind|null``, ``"detail": what|null``;
  then ``{"done": true}``. Nothing here is a verdict: the trusted side compares the values
  with what it kept outside (``graphs.sandbox.probes``), so a forged line can only say what
  the code could have computed.

Before the code runs, the harness also leaves ``sys.modules`` and ``sys.path`` (and with
Landlock its folder cannot be read), so the code cannot import it; code that digs it out of
the interpreter anyway can only change what it sends, which is judged outside.
In a PID namespace the supervisor is its init, so every process the code left behind dies
when it exits.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import re
import signal
import sys
import types
from typing import NamedTuple

import confine
import plain
from guard import Guard

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MESSAGE_CHARS = 300
_HARNESS = ("runner", "confine", "guard", "plain")


def main() -> None:
    job = json.loads(sys.stdin.read())
    report, observe = job["report_fd"], job["observe_fd"]
    worker = os.fork()
    if worker == 0:
        channel = Channel(report)
        try:
            _work(job, channel, observe)
        except BaseException as exc:  # the runner itself failed: say so, never hang
            channel.emit({"internal": _describe(exc)})
            _emit(observe, {"internal": _describe(exc)})
        finally:
            _flush()
            os._exit(0)
    os.close(observe)
    while True:  # as a PID namespace's init, reap every orphan until the worker ends
        pid, status, usage = os.wait4(-1 if os.getpid() == 1 else worker, 0)
        if pid == worker:
            break
    signalled = os.WIFSIGNALED(status)
    _emit(report, {"exit": None if signalled else os.WEXITSTATUS(status),
                   "signal": os.WTERMSIG(status) if signalled else None,
                   "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)})


class Channel:
    """The worker's end of the report pipe, open until the code is about to run."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def emit(self, line: dict) -> None:
        if self.fd is not None:
            _emit(self.fd, line)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _work(job: dict, channel: Channel, observe: int) -> None:
    workdir, limits = job["workdir"], job["limits"]
    os.chdir(workdir)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the limit: EFBIG, not a silent death
    confine.set_limits(**limits, own_user_namespace=job["own_user_namespace"])
    try:
        code = compile(job["code"], "solution.py", "exec")
    except Exception as exc:  # SyntaxError, or code nested past what the compiler takes (RecursionError...)
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        channel.emit({"syntax_error": f"{getattr(exc, 'msg', exc)}{where}"})
        return
    probes = [(p["kind"], compile(p["source"], f"<test {i + 1}>", "eval" if p["kind"] == "value" else "exec"))
              for i, p in enumerate(job["probes"])]
    if job["landlock_abi"]:
        confine.restrict_paths(job["landlock_abi"], [workdir], job["readable"], ["/dev/null", "/dev/zero",
                                                                                   "/dev/urandom"])
    if job["seccomp"]:
        confine.deny_sockets()
    guard = Guard(workdir, frozenset(job["deny"]))
    guard.install()
    for name in _HARNESS:
        sys.modules.pop(name, None)
    sys.path[:] = [p for p in sys.path if p != job["harness"]]
    channel.close()  # from here on the code runs: nothing it does reaches the report pipe
    me = os.getpid()
    namespace: dict = {"__name__": "solution", "__builtins__": builtins}
    load = _run(lambda: exec(code, namespace), guard, me)
    carried = load  # what the code tried when loaded is told with the first probe
    for i, (kind, compiled) in enumerate(probes):
        line: dict = {"test": i}
        if load.error is not None:
            outcome = Outcome(f"the code raised {load.error} when loaded", None, None)
        elif kind == "value":
            box: list = []
            outcome = _run(lambda: box.append(plain.encode(eval(compiled, dict(namespace)))), guard, me)
            line["value"] = box[0] if box else None
        else:
            trace: list = []
            outcome = _run(lambda: _trace(compiled, _traced(namespace, trace)), guard, me)
            line["trace"] = trace
        if carried.kind is not None and outcome.kind is None:
            outcome = outcome._replace(kind=carried.kind, what=carried.what)
        carried = Outcome(None, None, None)
        tried = None if outcome.kind is None else f"it tried {outcome.what}"
        line.update(raised=outcome.error or tried, violation=outcome.kind, detail=outcome.what)
        _emit(observe, line)
    _emit(observe, {"done": True})


def _traced(namespace: dict, trace: list) -> dict:
    """A copy of the code's namespace in which each of its functions records its calls."""
    scope = dict(namespace)
    for name, value in namespace.items():
        if type(value) is types.FunctionType and not name.startswith("__"):
            scope[name] = _recorder(name, value, trace)
    return scope


def _recorder(name: str, function, trace: list):
    def call(*args, **kwargs):
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:
            trace.append({"call": name, "raised": type(exc).__name__, "args": plain.encode([list(args), kwargs])})
            raise
        trace.append({"call": name, "result": plain.encode(result), "args": plain.encode([list(args), kwargs])})
        return result
    return call


def _trace(test, scope: dict) -> None:
    """Run one trace probe: the test, then each test_* function it defines."""
    before = set(scope)
    exec(test, scope)
    for name in [n for n in scope if n not in before and n.startswith("test") and callable(scope[n])]:
        scope[name]()


class Outcome(NamedTuple):
    error: str | None
    """what the code raised"""
    kind: str | None
    """the violation (a limit reached, a forbidden action tried)"""
    what: str | None


def _run(action, guard: Guard, me: int) -> Outcome:
    """Run untrusted code and say what it raised and what forbidden thing it tried."""
    guard.take()
    error = None
    try:
        action()
    except BaseException as exc:
        error = exc
    if os.getpid() != me:  # a process the code forked: it reports nothing
        os._exit(0)
    kind, what = _violation(error, guard.take(), guard.deny)
    return Outcome(None if error is None else _describe(error), kind, what)


def _violation(error: BaseException | None, attempts: list[tuple[str, str]],
               denied: frozenset[str]) -> tuple[str | None, str | None]:
    for kind in ("filesystem", "network", "native"):
        tried = [what for k, what in attempts if k == kind]
        if tried:
            return kind, tried[0]
    if isinstance(error, MemoryError):
        return "memory", "MemoryError"
    if isinstance(error, OSError) and error.errno == errno.EFBIG:
        return "file_size", _describe(error)
    spawned = [what for k, what in attempts if k == "processes"]
    if spawned and ("processes" in denied or (isinstance(error, OSError) and error.errno == errno.EAGAIN)):
        return "processes", spawned[0]
    return None, None


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException:  # the code's own exception class may refuse to print
        text = ""
    return _short(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _short(text: str) -> str:
    text = _ADDRESS.sub("", text)
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def _flush() -> None:
    """What the code printed reaches its files (the worker ends with ``os._exit``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _emit(fd: int, line: dict) -> None:
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    except (OSError, ValueError, TypeError, RecursionError):
        pass


if __name__ == "__main__":
    main()
