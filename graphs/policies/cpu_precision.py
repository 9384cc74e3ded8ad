"""Whether bfloat16 pays on this CPU: measured, not read off the CPU's flags.

A CPU with AVX512-BF16 multiplies bfloat16 natively, but that does not make its bfloat16
products faster than its float32 ones: on some such CPUs a bfloat16 model decodes at about
twice float32's speed, on others more slowly than float32 (docs/evaluation.md, "Precision").
So "auto" precision on a CPU times one decode-shaped product in both precisions and serves
bfloat16 only where it is clearly faster.

The measurement is made once per machine and kept in the cache folder (``RECORD``), so that
every process, and every worker of one job, plays the same precision even when one of them
measured while the cores were busy; delete the file to measure again.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import statistics
import time
from pathlib import Path

import torch

SPEEDUP_NEEDED = 1.3
"""bfloat16 pays when its product takes at most 1/SPEEDUP_NEEDED of float32's time; the margin keeps
a CPU where the two are about even on float32, whose sums are exact enough for any batch."""
RECORD = "cpu-precision.json"
"""in the cache folder: machine key -> the measured speedup"""
_ROWS, _IN, _OUT = 64, 1024, 2048
"""the probe: a batch of 64 rows through a linear layer of a small model, as in decoding"""
_CALLS, _ROUNDS = 2, 9


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX); elsewhere bfloat16 is
    emulated and much slower than float32. Native is not faster: ``bfloat16_pays`` measures."""
    return any(flag in _cpuinfo("flags") for flag in ("avx512_bf16", "amx_bf16"))


def bfloat16_speedup(cache_dir: Path | None = None) -> float:
    """float32's time over bfloat16's for the probe's product on this machine; 0.0 on a CPU
    without native bfloat16 (never timed: bfloat16 is emulated there). With ``cache_dir``, the
    machine's recorded figure when there is one, else measured and recorded (one process
    measures while the others wait for it); without, measured once in this process."""
    return _speedup(None if cache_dir is None else Path(cache_dir))


@functools.cache
def _speedup(cache_dir: Path | None) -> float:
    if not native_bf16_cpu():
        return 0.0
    if cache_dir is None:
        return _measure()
    cache_dir.mkdir(parents=True, exist_ok=True)
    record, key = cache_dir / RECORD, _machine_key()
    with open(cache_dir / f"{RECORD}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            known = json.loads(record.read_text())
        except (OSError, ValueError):
            known = {}
        if not isinstance(known, dict):  # damaged: measured again, like a missing record
            known = {}
        if not isinstance(known.get(key), (int, float)):
            known[key] = _measure()
            tmp = record.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=1))
            tmp.replace(record)
        return float(known[key])


def bfloat16_pays(cache_dir: Path | None = None) -> bool:
    """Whether "auto" precision serves bfloat16 on this CPU: it multiplies bfloat16 natively and
    the probe's product runs at least ``SPEEDUP_NEEDED`` times float32's speed (``cache_dir``:
    as ``bfloat16_speedup``)."""
    return bfloat16_speedup(cache_dir) >= SPEEDUP_NEEDED


def _measure() -> float:
    """The median over rounds of float32's time over bfloat16's, each round timing both (in
    alternating order). The product runs on one thread, timed by that thread's CPU clock: other
    processes on the cores then change the figure little (with torch's threads, waiting for
    each other on busy cores, it ranged from 0.8x to 1.4x the figure measured on idle ones)."""
    generator = torch.Generator().manual_seed(0)
    operands = {dtype: (torch.randn(_ROWS, _IN, generator=generator).to(dtype),
                        torch.randn(_OUT, _IN, generator=generator).to(dtype))
                for dtype in (torch.float32, torch.bfloat16)}

    def timed(dtype: torch.dtype) -> float:
        x, w = operands[dtype]
        start = time.thread_time()
        for _ in range(_CALLS):
            torch.nn.functional.linear(x, w)
        return time.thread_time() - start

    ratios = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            for dtype in operands:  # warm the kernels up
                timed(dtype)
            for index in range(_ROUNDS):
                order = (torch.float32, torch.bfloat16) if index % 2 == 0 else (torch.bfloat16, torch.float32)
                seconds = {dtype: timed(dtype) for dtype in order}
                ratios.append(seconds[torch.float32] / seconds[torch.bfloat16])
    finally:
        torch.set_num_threads(threads)
    return statistics.median(ratios)


@functools.cache
def _cpuinfo(field: str) -> str:
    """The first CPU's ``field`` in /proc/cpuinfo ("" where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.split(":", 1)[0].strip() == field and ":" in line), "")


def _machine_key() -> str:
    """What the measurement depends on: the CPU (model name and flags) and torch."""
    flags = hashlib.sha256(_cpuinfo("flags").encode()).hexdigest()[:12]
    return f"{_cpuinfo('model name') or '?'} | flags {flags} | torch {torch.__version__}"
