"""Whether bfloat16 pays on this CPU: measured, not read off the CPU's flags.

A CPU with AVX512-BF16 multiplies bfloat16 natively, but that does not make its bfloat16
products faster than its float32 ones: on some such CPUs a bfloat16 model decodes at about
twice float32's speed, on others more slowly than float32 (docs/evaluation.md, "Precision").
So "auto" precision on a CPU times one decode-shaped product in both precisions, once per
process, and serves bfloat16 only where it is clearly faster.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import torch

SPEEDUP_NEEDED = 1.3
"""bfloat16 pays when its product takes at most 1/SPEEDUP_NEEDED of float32's time; the margin keeps
a CPU where the two are about even on float32, whose sums are exact enough for any batch."""
_ROWS, _IN, _OUT = 64, 1024, 2048
"""the probe: a batch of 64 rows through a linear layer of a small model, as in decoding"""
_CALLS, _REPEATS = 4, 5


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX); elsewhere bfloat16 is
    emulated and much slower than float32. Native is not faster: ``bfloat16_pays`` measures."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


@functools.cache
def bfloat16_speedup() -> float:
    """float32's time over bfloat16's for the probe's product (best of ``_REPEATS``, the two
    precisions interleaved so that a change in the machine's speed touches both); 0.0 on a CPU
    without native bfloat16, where bfloat16 is emulated."""
    if not native_bf16_cpu():
        return 0.0
    generator = torch.Generator().manual_seed(0)
    operands = {dtype: (torch.randn(_ROWS, _IN, generator=generator).to(dtype),
                        torch.randn(_OUT, _IN, generator=generator).to(dtype))
                for dtype in (torch.float32, torch.bfloat16)}
    best = dict.fromkeys(operands, float("inf"))
    with torch.inference_mode():
        for x, w in operands.values():  # warm the kernels up
            torch.nn.functional.linear(x, w)
        for _ in range(_REPEATS):
            for dtype, (x, w) in operands.items():
                start = time.perf_counter()
                for _ in range(_CALLS):
                    torch.nn.functional.linear(x, w)
                best[dtype] = min(best[dtype], time.perf_counter() - start)
    return best[torch.float32] / best[torch.bfloat16]


def bfloat16_pays() -> bool:
    """Whether "auto" precision serves bfloat16 on this CPU: it multiplies bfloat16 natively and
    the probe's product runs at least ``SPEEDUP_NEEDED`` times float32's speed."""
    return bfloat16_speedup() >= SPEEDUP_NEEDED
