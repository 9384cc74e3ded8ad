"""The rule judge of code-debug: a task's tests run on code in the sandbox."""

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


async def run_tests(options: CodeDebugOptions, code: str, tests: Sequence[str]) -> RunResult:
    """In a worker thread: a run blocks for as long as the code runs."""
    sandbox = sandbox_for(options)
    return await asyncio.to_thread(sandbox.run, code, list(tests))


def verdict(result: RunResult) -> Verdict:
    return Verdict(status=str(result.status), passed=result.passed, total=result.total,
                   violation=None if result.violation is None else str(result.violation), cause=result.cause,
                   report=result.failures())


def no_code(total: int) -> Verdict:
    return Verdict(status=NO_CODE, passed=0, total=total, violation=None, cause="the answer holds no code",
                   report="Your answer held no ```python code block, so no test ran.")
