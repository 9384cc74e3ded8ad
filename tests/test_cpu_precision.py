""""auto" precision on a CPU serves bfloat16 only where a timed product says it is faster than
float32: native bfloat16 instructions alone do not make it so. The measurement is kept per
machine, so that processes measuring on busy cores do not choose differently."""

from __future__ import annotations

import json
import math

import pytest
import torch

from graphs.policies import cpu_precision
from graphs.policies.base_models import resolve_dtype


@pytest.fixture(autouse=True)
def _measure_afresh():
    cpu_precision._speedup.cache_clear()
    yield
    cpu_precision._speedup.cache_clear()


def test_a_cpu_that_emulates_bfloat16_is_never_timed(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_precision, "native_bf16_cpu", lambda: False)
    monkeypatch.setattr(cpu_precision, "_measure", _must_not_run)
    assert cpu_precision.bfloat16_speedup(tmp_path) == 0.0
    assert not cpu_precision.bfloat16_pays(tmp_path)
    assert not (tmp_path / cpu_precision.RECORD).exists()


@pytest.mark.skipif(not cpu_precision.native_bf16_cpu(), reason="this CPU has no native bfloat16 to time")
def test_this_cpu_is_timed():
    speedup = cpu_precision.bfloat16_speedup()
    assert math.isfinite(speedup) and speedup > 0
    assert cpu_precision.bfloat16_speedup() == speedup  # once per process
    assert cpu_precision.bfloat16_pays() is (speedup >= cpu_precision.SPEEDUP_NEEDED)


def test_the_machine_is_measured_once_and_its_figure_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_precision, "native_bf16_cpu", lambda: True)
    monkeypatch.setattr(cpu_precision, "_measure", lambda: 2.0)
    assert cpu_precision.bfloat16_pays(tmp_path)
    kept = json.loads((tmp_path / cpu_precision.RECORD).read_text())
    assert list(kept.values()) == [2.0] and cpu_precision._machine_key() in kept

    cpu_precision._speedup.cache_clear()  # another process, on busy cores: reads, does not time
    monkeypatch.setattr(cpu_precision, "_measure", _must_not_run)
    assert cpu_precision.bfloat16_speedup(tmp_path) == 2.0

    cpu_precision._speedup.cache_clear()  # another CPU (or torch) sharing the folder: its own figure
    monkeypatch.setattr(cpu_precision, "_machine_key", lambda: "another CPU")
    monkeypatch.setattr(cpu_precision, "_measure", lambda: 0.7)
    assert not cpu_precision.bfloat16_pays(tmp_path)
    assert json.loads((tmp_path / cpu_precision.RECORD).read_text())["another CPU"] == 0.7
    assert len(json.loads((tmp_path / cpu_precision.RECORD).read_text())) == 2


@pytest.mark.parametrize("damage", ["{not json", "[1, 2]", '{"KEY": "fast"}'])
def test_a_damaged_record_is_measured_again(monkeypatch, tmp_path, damage):
    monkeypatch.setattr(cpu_precision, "native_bf16_cpu", lambda: True)
    monkeypatch.setattr(cpu_precision, "_measure", lambda: 0.7)
    (tmp_path / cpu_precision.RECORD).write_text(damage.replace("KEY", cpu_precision._machine_key()))
    assert cpu_precision.bfloat16_speedup(tmp_path) == 0.7
    assert json.loads((tmp_path / cpu_precision.RECORD).read_text())[cpu_precision._machine_key()] == 0.7


@pytest.mark.parametrize(("speedup", "served"), [
    (2.0, torch.bfloat16),  # clearly faster: bfloat16
    (cpu_precision.SPEEDUP_NEEDED, torch.bfloat16),
    (1.1, torch.float32),  # about even: float32's exacter sums for free
    (0.8, torch.float32),  # native instructions, slower products
    (0.0, torch.float32),  # emulated
])
def test_auto_serves_what_the_measurement_chose(monkeypatch, tmp_path, speedup, served):
    monkeypatch.setattr(cpu_precision, "bfloat16_speedup", lambda cache_dir=None: speedup)
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu, serving=True, cache_dir=tmp_path) == served
    assert resolve_dtype("auto", cpu) == torch.float32  # training asks for its own precision
    assert resolve_dtype("bfloat16", cpu, serving=True) == torch.bfloat16  # named: always as asked
    assert resolve_dtype("auto", torch.device("cuda"), serving=True) == torch.bfloat16


def _must_not_run(*args, **kwargs):
    raise AssertionError("timed where it should not have been")
