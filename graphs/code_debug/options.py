"""The options of code-debug."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions
from graphs.sandbox import Mode

BUG_SOURCES = ("task", "breaker")


@dataclass(frozen=True)
class CodeDebugOptions(GameOptions):
    bugs: str = "task"
    """where the bug comes from: 'task' (the task's buggy code) or 'breaker' (the breaker seat writes one into
    the reference solution; a breaker whose code fails no test is replaced by a seeded mutation)"""
    attempts: int = 1
    """fixes the fixer may write; each after the first sees what its last fix failed"""
    sandbox: str = "strict"
    """'strict': refuse to run code where the kernel cannot confine it; 'degraded': run it with the layers there
    are, a Python audit hook standing in for the others (weaker)"""
    cpu_seconds: float = 2.0
    """CPU seconds one run of a task's tests may take (wall clock: five times as long)"""

    def __post_init__(self) -> None:
        if self.bugs not in BUG_SOURCES:
            raise ValueError(f"bugs must be one of {', '.join(BUG_SOURCES)}, got {self.bugs!r}")
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        modes = [m.value for m in Mode]
        if self.sandbox not in modes:
            raise ValueError(f"sandbox must be one of {', '.join(modes)}, got {self.sandbox!r}")
        if not self.cpu_seconds >= 1:
            raise ValueError(f"cpu_seconds must be at least 1 (the CPU limit counts whole seconds), got "
                             f"{self.cpu_seconds}")
