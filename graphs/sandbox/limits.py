"""What a sandboxed run may use, and how strict the sandbox is where the OS lacks a layer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Mode(StrEnum):
    STRICT = "strict"
    """refuse to run where the kernel cannot confine writes, network or processes"""
    DEGRADED = "degraded"
    """run anyway: a Python audit hook denies what the kernel cannot (weaker; see graphs.sandbox.guard)"""


@dataclass(frozen=True)
class Limits:
    cpu_s: float = 2.0
    """CPU seconds of the code (RLIMIT_CPU; whole seconds, at least 1); past them it is killed"""
    wall_s: float = 5.0
    """wall-clock seconds of the whole run, start-up included; past them every process is killed"""
    memory_mb: int = 256
    """address space in MiB (RLIMIT_AS); an allocation past it raises MemoryError"""
    file_size_mb: float = 1.0
    """the largest file the code may write, its printed output included (RLIMIT_FSIZE)"""
    processes: int = 16
    """processes the code may start (RLIMIT_NPROC)"""

    def __post_init__(self) -> None:
        bad = [f"{name}={value}" for name, value in vars(self).items() if not value > 0]
        if bad:
            raise ValueError(f"sandbox limits must be positive: {', '.join(bad)}")
        if self.wall_s < self.cpu_s:
            raise ValueError(f"wall_s ({self.wall_s}) is below cpu_s ({self.cpu_s}): the CPU limit could never "
                             "apply; raise wall_s")
