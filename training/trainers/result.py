"""What a training run returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class TrainResult:
    """The trained adapter's folder, its final metrics and the per-step log."""

    adapter_dir: Path
    """the output folder: adapter_config.json, adapter_model.safetensors, sparring.json"""
    metrics: dict[str, float]
    """``loss`` (last logged), ``train_loss`` (mean over the run), ``steps``, ``runtime_s``,
    and the trainer's own, e.g. ``rewards/accuracies`` (DPO) or ``clip_fraction`` (PPO)"""
    log_history: list[dict[str, float]] = field(default_factory=list)
    """one entry per ``logging_steps`` optimiser steps, as the trainer logged it"""
