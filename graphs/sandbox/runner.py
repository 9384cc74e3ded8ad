"""The program that runs inside the sandbox (standard library only; started by
``graphs.sandbox.sandbox`` as ``python -I -S -c``, with this folder on ``sys.path``).

It reads its job from stdin (code, tests, limits, which layers to apply), forks a worker and
waits for it. The worker confines itself (resource limits, Landlock, seccomp, the audit hook),
then runs the code once and each test in a copy of the code's namespace, writing one JSON line
per test to the report pipe as it goes: a test that hangs leaves the lines before it. The
supervisor then writes the worker's exit status and CPU time. In a PID namespace the supervisor
is its init, so every process the code left behind dies when it exits.

Report lines: ``{"syntax_error": msg}``; ``{"test": i, "passed": bool, "error": msg|null,
"violation": kind|null, "detail": what|null}``; ``{"done": true}``; ``{"exit": code, "signal":
sig|null, "cpu_s": s}`` (the supervisor). A test is a snippet that passes when it runs without
raising; for ``assert <expr> == <expected>`` the report says what the expression gave.
"""

from __future__ import annotations

import ast
import builtins
import errno
import json
import os
import re
import signal
import sys
from typing import NamedTuple

import confine
from guard import Guard

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MESSAGE_CHARS = 300


def main() -> None:
    job = json.loads(sys.stdin.read())
    report = job["report_fd"]
    worker = os.fork()
    if worker == 0:
        try:
            _work(job, report)
        except BaseException as exc:  # the runner itself failed: say so, never hang
            _emit(report, {"internal": _describe(exc)})
        finally:
            os._exit(0)
    while True:  # as a PID namespace's init, reap every orphan until the worker ends
        pid, status, usage = os.wait4(-1 if os.getpid() == 1 else worker, 0)
        if pid == worker:
            break
    signalled = os.WIFSIGNALED(status)
    _emit(report, {"exit": None if signalled else os.WEXITSTATUS(status),
                   "signal": os.WTERMSIG(status) if signalled else None,
                   "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)})


def _work(job: dict, report: int) -> None:
    workdir, limits = job["workdir"], job["limits"]
    os.chdir(workdir)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past the limit: EFBIG, not a silent death
    confine.set_limits(**limits, own_user_namespace=job["own_user_namespace"])
    try:
        code = compile(job["code"], "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        _emit(report, {"syntax_error": f"{getattr(exc, 'msg', exc)}{where}"})
        _emit(report, {"done": True})
        return
    tests = [ast.parse(test, f"<test {i + 1}>") for i, test in enumerate(job["tests"])]
    if job["landlock_abi"]:
        confine.restrict_paths(job["landlock_abi"], [workdir], job["readable"], ["/dev/null", "/dev/zero",
                                                                                   "/dev/urandom"])
    if job["seccomp"]:
        confine.deny_sockets()
    guard = Guard(workdir, frozenset(job["deny"]))
    guard.install()
    me = os.getpid()
    namespace: dict = {"__name__": "solution", "__builtins__": builtins}
    load = _run(lambda: exec(code, namespace), guard, me)
    carried = load  # what the code tried when loaded is told with the first test
    for i, test in enumerate(tests):
        if load.error is not None:
            outcome = Outcome(f"the code raised {load.error} when loaded", None, None)
        else:
            outcome = _run(lambda: _check(test, dict(namespace)), guard, me)
        if carried.kind is not None and outcome.kind is None:
            outcome = outcome._replace(kind=carried.kind, what=carried.what)
        carried = Outcome(None, None, None)
        tried = None if outcome.kind is None else f"it tried {outcome.what}"
        _emit(report, {"test": i, "passed": outcome.error is None and outcome.kind is None,
                       "error": outcome.error or tried, "violation": outcome.kind, "detail": outcome.what})
    _emit(report, {"done": True})


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


def _check(test: ast.Module, scope: dict) -> None:
    """Run one test. ``assert X == Y`` (no message) is evaluated in two halves so a failure
    says what X gave."""
    body = test.body
    if (len(body) == 1 and isinstance(body[0], ast.Assert) and body[0].msg is None
            and isinstance(body[0].test, ast.Compare) and len(body[0].test.ops) == 1
            and isinstance(body[0].test.ops[0], ast.Eq)):
        got = eval(compile(ast.Expression(body[0].test.left), "<test>", "eval"), scope)
        expected = eval(compile(ast.Expression(body[0].test.comparators[0]), "<test>", "eval"), scope)
        if not got == expected:
            raise AssertionError(f"got {_short(repr(got))}")
        return
    before = set(scope)
    exec(compile(test, "<test>", "exec"), scope)
    for name in [n for n in scope if n not in before and n.startswith("test") and callable(scope[n])]:
        scope[name]()


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
    text = str(exc)
    return _short(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _short(text: str) -> str:
    text = _ADDRESS.sub("", text)
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def _emit(fd: int, line: dict) -> None:
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    except OSError:
        pass


if __name__ == "__main__":
    main()
