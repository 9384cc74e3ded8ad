"""The rule judge of code-debug: a task's tests run on code in the sandbox, and the verdict is
reached outside it (``graphs.sandbox.probes``): the values the code's functions give are
compared with the tests' expected values, which never enter the run, and a test of another
shape compares the code's calls with the task's reference solution's. Code that returns an
object equal to everything, patches the test runner or writes its own report passes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from graphs.code_debug.options import CodeDebugOptions
from graphs.code_debug.state import Verdict
from graphs.sandbox import Limits, RunResult, Sandbox

NO_CODE = "no_code"
"""the status of an answer that holds no code"""
WALL_PER_CPU = 5


def sandbox_for(options: CodeDebugOptions) -> Sandbox:
    """The sandbox the options ask for (SandboxUnavailable in strict mode on a machine that cannot confine)."""
    return Sandbox(Limits(cpu_s=options.cpu_seconds, wall_s=WALL_PER_CPU * options.cpu_seconds), options.sandbox)


async def run_tests(options: CodeDebugOptions, code: str, tests: Sequence[str], reference: str | None) -> RunResult:
    """In a worker thread: a run blocks for as long as the code runs. ``reference``: the task's
    correct solution (the expected calls of tests that are not ``assert X == literal``)."""
    sandbox = sandbox_for(options)
    return await asyncio.to_thread(sandbox.run, code, list(tests), reference)


def verdict(result: RunResult) -> Verdict:
    return Verdict(status=str(result.status), passed=result.passed, total=result.total,
                   violation=None if result.violation is None else str(result.violation), cause=result.cause,
                   report=result.failures())


def no_code(total: int) -> Verdict:
    return Verdict(status=NO_CODE, passed=0, total=total, violation=None, cause="the answer holds no code",
                   report="Your answer held no ```python code block, so no test ran.")
