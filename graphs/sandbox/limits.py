"""What a sandboxed run may use, and how strict the sandbox is where the OS lacks a layer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

_OWN_PROCESSES = 2
"""the runner's supervisor and worker"""


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
    """processes the code may start (RLIMIT_NPROC); without a memory cgroup, lowered so that
    processes x ``memory_mb`` stays within ``run_memory_mb`` (see ``Sandbox.describe``)"""
    run_memory_mb: int = 1024
    """memory of the whole run, all its processes together: a cgroup's bound where the sandbox
    can make one, else the bound that processes x ``memory_mb`` is kept under"""
    disk_mb: float = 64.0
    """bytes the run may hold in its working folder, all files together"""
    files: int = 1000
    """files and folders the run may make in its working folder"""

    def __post_init__(self) -> None:
        bad = [f"{name}={value}" for name, value in vars(self).items() if not value > 0]
        if bad:
            raise ValueError(f"sandbox limits must be positive: {', '.join(bad)}")
        if self.wall_s < self.cpu_s:
            raise ValueError(f"wall_s ({self.wall_s}) is below cpu_s ({self.cpu_s}): the CPU limit could never "
                             "apply; raise wall_s")
        if self.run_memory_mb < self.memory_mb:
            raise ValueError(f"run_memory_mb ({self.run_memory_mb}) is below memory_mb ({self.memory_mb}): one "
                             "process could never use its own limit; raise run_memory_mb or lower memory_mb")

    def processes_within(self, run_memory_mb: int) -> int:
        """The processes the code may start when only address-space limits bound memory: the
        supervisor and the worker count too, so (processes + 2) x memory_mb <= run_memory_mb."""
        return max(0, min(self.processes, run_memory_mb // self.memory_mb - _OWN_PROCESSES))
