"""The trusted side's verdict on a sandboxed run: from the supervisor's report (trusted), the
code's observations (untrusted plain data) and what the probes kept outside.

A test passes only when exactly one observation names it, the value in it rebuilt as fresh
built-ins equals the expected value held outside (a value probe), or its call trace equals the
reference solution's (a trace probe), and no violation is noted. Whatever the observations
say of themselves (a ``passed`` key, an ``internal`` failure, a forged ``done``) decides
nothing; a malformed or repeated observation fails its test. Nothing here raises because of
what the code did: only a report line the supervisor wrote before the code ran can say the
sandbox itself failed.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from typing import Any

from graphs.sandbox import plain
from graphs.sandbox.limits import Limits
from graphs.sandbox.probes import Probe
from graphs.sandbox.result import Check, RunResult, Status, Violation

_MESSAGE_CHARS = 300


class SandboxError(RuntimeError):
    """The sandbox itself failed before the code ran (never something the code did)."""


@dataclass
class Execution:
    """What one run of code left: the supervisor's lines, the code's lines, and the bounds the
    parent saw it reach."""

    report: list[dict[str, Any]]
    observations: list[dict[str, Any]]
    timed_out: bool = False
    disk: str | None = None
    """why the working folder went past its bound (None: it did not)"""
    oom_killed: bool = False
    stdout: str = ""
    wall_s: float = 0.0


def lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects among the lines (anything else is dropped)."""
    found = []
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if isinstance(line, dict):
            found.append(line)
    return found


def judge(run: Execution, tests: list[str], probes: list[Probe], limits: Limits, layers: tuple[str, ...],
          reference: Execution | None = None) -> RunResult:
    internal = next((line["internal"] for line in run.report if "internal" in line), None)
    if internal is not None:
        raise SandboxError(f"the sandbox's runner failed before the code ran: {internal}")
    exit_line = next((line for line in run.report if "exit" in line), {})
    syntax = next((line["syntax_error"] for line in run.report if "syntax_error" in line), None)
    stopped = _stopped(run, exit_line, limits)
    seen = _by_test(run.observations, len(tests))
    expected_traces = _by_test(reference.observations, len(tests)) if reference is not None else {}
    checks = []
    for i, (test, probe) in enumerate(zip(tests, probes, strict=True)):
        line = seen.get(i)
        if line is None:
            checks.append(Check(i, False, f"not run: {_not_run(stopped, syntax)}", test))
        else:
            checks.append(_check(i, test, probe, line, expected_traces, reference is not None))
    done = any(line.get("done") is True for line in run.observations)

    def result(status: Status, cause: str, violation: Violation | None = None) -> RunResult:
        return RunResult(status, tuple(checks), cause, violation, layers, run.stdout, round(run.wall_s, 3))

    if stopped is not None:
        return result(Status.VIOLATION, stopped[1], stopped[0])
    if syntax is not None:
        return result(Status.SYNTAX_ERROR, f"the code does not compile: {_text(syntax)}")
    violated = next(((i, line, kind) for i, line in sorted(seen.items())
                     if (kind := _violation(line.get("violation"))) is not None), None)
    if violated is not None:
        i, line, kind = violated
        return result(Status.VIOLATION, f"{_DENIED[kind]}: {_text(line.get('detail'))} (test {i + 1})", kind)
    if not done or len(seen) < len(tests):
        how = (f"signal {exit_line['signal']}" if exit_line.get("signal") else f"exit code {exit_line.get('exit')}")
        return result(Status.CRASHED, f"the process ended before its tests finished ({how})")
    passed = sum(check.passed for check in checks)
    if passed == len(checks):
        return result(Status.PASSED, f"all {len(checks)} tests pass")
    first = next(check for check in checks if not check.passed)
    return result(Status.FAILED, f"{passed} of {len(checks)} tests pass; test {first.index + 1} fails")


def _by_test(observations: list[dict[str, Any]], count: int) -> dict[int, dict[str, Any]]:
    """The observation of each test; a test named twice gets a line that fails it."""
    found: dict[int, dict[str, Any]] = {}
    for line in observations:
        i = line.get("test")
        if type(i) is not int or not 0 <= i < count:
            continue
        found[i] = {"raised": "the run reported this test twice", "twice": True} if i in found else line
    return found


def _check(i: int, test: str, probe: Probe, line: dict[str, Any], expected_traces: dict[int, dict[str, Any]],
           has_reference: bool) -> Check:
    def failed(why: str) -> Check:
        return Check(i, False, _text(why), test)

    if line.get("twice"):
        return failed(line["raised"])
    if line.get("violation"):
        return failed(line.get("raised") or f"it tried {line.get('detail')}")
    if line.get("raised") is not None:
        return failed(line["raised"])
    if probe.kind == "value":
        if "value" not in line:
            return failed("the run sent no value")
        try:
            got = plain.decode(line["value"])
        except ValueError as exc:
            return failed(f"the run sent a malformed value ({exc})")
        same = got is probe.expected if probe.identity else _equal(got, probe.expected)
        return Check(i, True, None, test) if same else failed(f"AssertionError: got {_repr(got)}")
    if not has_reference:
        return Check(i, True, None, test, trusted=False)
    expected = expected_traces.get(i)
    if expected is None or expected.get("raised") is not None or "trace" not in expected:
        why = "not run" if expected is None else expected.get("raised") or "no trace"
        return failed(f"the reference solution fails this test ({_text(why)}): the task is wrong")
    try:
        same = _equal(_calls(line.get("trace")), _calls(expected["trace"]))
    except ValueError as exc:
        return failed(f"the run sent a malformed trace ({exc})")
    return Check(i, True, None, test) if same else failed("the code's calls gave other values than the reference's")


def _calls(trace: Any) -> list[tuple]:
    if not isinstance(trace, list):
        raise ValueError("not a list")
    calls = []
    for call in trace:
        if not isinstance(call, dict):
            raise ValueError("a call is not an object")
        outcome = ("raised", str(call["raised"])) if "raised" in call else ("result", plain.decode(call.get("result")))
        calls.append((str(call.get("call")), outcome, plain.decode(call.get("args"))))
    return calls


def _equal(got: Any, expected: Any) -> bool:
    """``==`` between fresh built-ins (never an object of the code's making)."""
    try:
        return bool(got == expected)
    except (RecursionError, TypeError, ValueError):
        return False


def _repr(value: Any) -> str:
    try:
        return _text(repr(value))
    except (RecursionError, ValueError):
        return "<a value too deep to show>"


def _text(value: Any) -> str:
    text = str(value)
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."


def _violation(kind: Any) -> Violation | None:
    """The violation an observation names; None for none, or a kind the runner never writes
    (the test still fails: see ``_check``)."""
    try:
        return Violation(kind) if kind else None
    except ValueError:
        return None


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
    Violation.CPU_TIME: "stopped at the CPU limit",
    Violation.WALL_TIME: "stopped at the wall-clock limit",
    Violation.DISK: "stopped at the disk limit",
}


def _stopped(run: Execution, exit_line: dict[str, Any], limits: Limits) -> tuple[Violation, str] | None:
    """A limit that ended the run, from the supervisor's and the parent's account."""
    if run.disk is not None:
        return Violation.DISK, f"stopped at the disk limit: {run.disk}"
    if run.oom_killed:
        return Violation.MEMORY, f"stopped at the run's memory limit ({limits.run_memory_mb} MiB, all processes)"
    if run.timed_out:
        return Violation.WALL_TIME, f"stopped after {limits.wall_s:g} s of wall-clock time"
    sig, cpu = exit_line.get("signal"), exit_line.get("cpu_s") or 0.0
    if not isinstance(cpu, int | float):
        cpu = 0.0
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= max(1, round(limits.cpu_s)) - 0.05):
        return Violation.CPU_TIME, f"stopped after {cpu:g} s of CPU time (limit {limits.cpu_s:g} s)"
    if sig == signal.SIGXFSZ:
        return Violation.FILE_SIZE, f"stopped at the file-size limit ({limits.file_size_mb:g} MiB)"
    return None
