"""What a sandboxed run of code against its tests gives back: a judged result, never an
exception, whatever the code did."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    PASSED = "passed"
    """every test passed"""
    FAILED = "failed"
    """the code ran and some test failed"""
    SYNTAX_ERROR = "syntax_error"
    """the code does not compile"""
    VIOLATION = "violation"
    """a limit was reached or a forbidden action tried"""
    CRASHED = "crashed"
    """the process ended before its tests finished, not by a limit (os._exit, a segfault)"""


class Violation(StrEnum):
    CPU_TIME = "cpu_time"
    WALL_TIME = "wall_time"
    MEMORY = "memory"
    FILE_SIZE = "file_size"
    PROCESSES = "processes"
    FILESYSTEM = "filesystem"
    """a write, removal or creation outside the working directory"""
    NETWORK = "network"
    """a socket of any kind"""
    NATIVE = "native"
    """ctypes, in degraded mode only (it would bypass the audit hook)"""
    DISK = "disk"
    """the working folder past its bytes or files bound"""


@dataclass(frozen=True)
class Check:
    """One test's result."""

    index: int
    passed: bool
    error: str | None = None
    """why it failed: what the code raised or gave, or why the test never ran"""
    source: str = ""
    """the test's code"""
    trusted: bool = True
    """False: a trace test run without a reference solution, so its pass is the run's own
    account (see ``graphs.sandbox.probes``); every other verdict is reached outside the run"""


@dataclass(frozen=True)
class RunResult:
    status: Status
    checks: tuple[Check, ...]
    """one per test, in order (tests that never ran failed)"""
    cause: str
    """one line saying what happened"""
    violation: Violation | None = None
    layers: tuple[str, ...] = ()
    """what confined the run (see graphs.sandbox)"""
    stdout: str = ""
    """the end of what the code printed"""
    wall_s: float = 0.0

    @property
    def passed(self) -> int:
        return sum(check.passed for check in self.checks)

    @property
    def total(self) -> int:
        return len(self.checks)

    @property
    def fraction(self) -> float:
        """Share of tests passed (0 with no tests)."""
        return self.passed / self.total if self.checks else 0.0

    def failures(self, most: int = 3) -> str:
        """What a programmer would read: the run's cause and the first failing tests."""
        lines = [self.cause]
        failing = [check for check in self.checks if not check.passed]
        if self.status in (Status.FAILED, Status.VIOLATION):
            for check in failing[:most]:
                lines.append(f"FAILED {check.source}\n  {check.error}")
            if len(failing) > most:
                lines.append(f"... and {len(failing) - most} more failing tests")
        return "\n".join(lines)
