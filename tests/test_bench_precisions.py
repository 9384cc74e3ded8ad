"""The training benchmarks leave bfloat16 out by default where the CPU would emulate it (a
training benchmark would then take hours), and say so; named, it is timed anyway."""

from __future__ import annotations

import pytest

import bench.play_throughput as play_throughput
from bench.play_throughput import precisions_to_time

DEFAULT = ("float32", "bfloat16")


@pytest.mark.parametrize("native", [True, False], ids=["bfloat16-cpu", "emulating-cpu"])
def test_bfloat16_is_timed_by_default_only_where_the_cpu_multiplies_it(monkeypatch, capsys, native):
    monkeypatch.setattr(play_throughput, "native_bf16_cpu", lambda: native)
    assert precisions_to_time(None, DEFAULT) == (list(DEFAULT) if native else ["float32"])
    said = " ".join(capsys.readouterr().err.split())
    assert ("bfloat16 left out (this CPU has no bfloat16 instructions" in said) is not native
    assert precisions_to_time(["bfloat16", "float32"], DEFAULT) == ["bfloat16", "float32"]  # named: timed anyway
    said = " ".join(capsys.readouterr().err.split())
    assert ("This CPU has no bfloat16 instructions (AVX512-BF16 or AMX): its bfloat16 products are emulated"
            in said) is not native
