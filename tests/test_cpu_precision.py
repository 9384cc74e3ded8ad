""""auto" precision on a CPU serves bfloat16 only where a timed product says it is faster than
float32: native bfloat16 instructions alone do not make it so."""

from __future__ import annotations

import math

import pytest
import torch

from graphs.policies import base_models, cpu_precision
from graphs.policies.base_models import resolve_dtype


@pytest.fixture(autouse=True)
def _measure_afresh():
    cpu_precision.bfloat16_speedup.cache_clear()
    yield
    cpu_precision.bfloat16_speedup.cache_clear()


def test_a_cpu_that_emulates_bfloat16_is_never_timed(monkeypatch):
    monkeypatch.setattr(cpu_precision, "native_bf16_cpu", lambda: False)
    monkeypatch.setattr(torch.nn.functional, "linear", _must_not_run)
    assert cpu_precision.bfloat16_speedup() == 0.0
    assert not cpu_precision.bfloat16_pays()


@pytest.mark.skipif(not cpu_precision.native_bf16_cpu(), reason="this CPU has no native bfloat16 to time")
def test_this_cpu_is_timed_once_per_process():
    speedup = cpu_precision.bfloat16_speedup()
    assert math.isfinite(speedup) and speedup > 0
    assert cpu_precision.bfloat16_speedup() == speedup  # the cached measurement, not a second timing
    assert cpu_precision.bfloat16_speedup.cache_info().hits == 1
    assert cpu_precision.bfloat16_pays() is (speedup >= cpu_precision.SPEEDUP_NEEDED)


@pytest.mark.parametrize(("speedup", "served"), [
    (2.0, torch.bfloat16),  # clearly faster: bfloat16
    (cpu_precision.SPEEDUP_NEEDED, torch.bfloat16),
    (1.1, torch.float32),  # about even: float32's exacter sums for free
    (0.8, torch.float32),  # native instructions, slower products
    (0.0, torch.float32),  # emulated
])
def test_auto_serves_what_the_measurement_chose(monkeypatch, speedup, served):
    monkeypatch.setattr(cpu_precision, "bfloat16_speedup", lambda: speedup)
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu, serving=True) == served
    assert resolve_dtype("auto", cpu) == torch.float32  # training asks for its own precision
    assert resolve_dtype("bfloat16", cpu, serving=True) == torch.bfloat16  # named: always as asked
    assert base_models.resolve_dtype("auto", torch.device("cuda"), serving=True) == torch.bfloat16


def _must_not_run(*args, **kwargs):
    raise AssertionError("a CPU without native bfloat16 was timed")
