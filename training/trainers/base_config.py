"""Settings every trainer shares; each trainer's config (``X_config.py``) extends one of these.

``TrainingConfig`` holds what any LoRA training run needs; ``TRLTrainingConfig`` adds what is
passed through to TRL's trainers (SFT, DPO, KTO). Every field has help text
(``metadata["help"]``); ``__post_init__`` rejects values that cannot work, saying how to fix
them. Configs are plain data: ``to_dict()`` is what ``training_jobs.config`` and
``sparring.json`` store.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from graphs.policies.models import BUNDLED
from training.trainers.lora import LoraSettings

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
REPORT_TARGETS = (
    "none", "all", "azure_ml", "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "flyte",
    "kubeflow", "mlflow", "neptune", "swanlab", "tensorboard", "trackio", "wandb",
)  # fmt: skip
"""``report_to`` values transformers 5 accepts (its ``INTEGRATION_TO_CALLBACK`` keys, "none", "all")."""


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """What every LoRA training run needs: the base model, the adapter shape, the optimiser."""

    model: str = field(
        default=BUNDLED,
        metadata={"help": 'Base model: "bundled" (SmolLM2-135M-Instruct), a local model folder or a hub id.'},
    )
    device: str = field(
        default="auto",
        metadata={"help": "auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps."},
    )
    lora: LoraSettings = field(
        default_factory=LoraSettings,
        metadata={"help": "Shape of a fresh adapter (a parent adapter keeps its own)."},
    )
    learning_rate: float = field(
        default=2e-4,
        metadata={"help": "Peak learning rate of AdamW on the LoRA parameters (LoRA wants far more than full tuning)."},
    )
    num_train_epochs: float = field(
        default=1.0,
        metadata={"help": "Passes over the dataset (a fraction runs part of the last pass); max_steps overrides it."},
    )
    max_steps: int = field(
        default=-1,
        metadata={"help": "Stop after this many optimiser steps; -1 runs num_train_epochs passes."},
    )
    max_seconds: float | None = field(
        default=None,
        metadata={"help": "Stop after the optimiser step that passes this many seconds of training (a time "
                          "budget, e.g. to compare recipes fairly); None: no limit."},
    )
    per_device_train_batch_size: int = field(
        default=4,
        metadata={"help": "Rows per forward pass (a DPO row is two sequences: chosen and rejected)."},
    )
    gradient_accumulation_steps: int = field(
        default=1,
        metadata={"help": "Forward passes accumulated into one optimiser step (effective batch = batch x this)."},
    )
    max_length: int = field(
        default=1024,
        metadata={"help": "Longest tokenised sequence (prompt + completion); longer ones keep their start."},
    )
    max_grad_norm: float = field(
        default=1.0,
        metadata={"help": "Gradients are clipped to this global L2 norm before each optimiser step."},
    )
    weight_decay: float = field(
        default=0.0,
        metadata={"help": "AdamW's decoupled weight decay on the LoRA parameters."},
    )
    seed: int = field(
        default=0,
        metadata={"help": "Seed of the fresh adapter's initialisation and of the data order."},
    )
    logging_steps: int = field(
        default=1,
        metadata={"help": "Optimiser steps between two entries of the log history."},
    )

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            object.__setattr__(self, "lora", LoraSettings(**self.lora))
        if not self.model:
            raise ValueError('model is empty: use "bundled", a local model folder or a Hugging Face model id.')
        if not _DEVICE.match(self.device):
            raise ValueError(f"device {self.device!r} is not a device: use auto, cpu, cuda, cuda:N or mps.")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ValueError(
                f"learning_rate must be a positive number, got {self.learning_rate}; LoRA usually trains "
                f"with 1e-5 to 2e-4."
            )
        if not self.num_train_epochs > 0:
            raise ValueError(
                f"num_train_epochs must be > 0, got {self.num_train_epochs}; to bound the run by steps, "
                f"set max_steps instead."
            )
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(f"max_steps must be -1 (run num_train_epochs) or >= 1, got {self.max_steps}.")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be > 0 (a training time budget) or None, got {self.max_seconds}.")
        if self.per_device_train_batch_size < 1:
            raise ValueError(
                f"per_device_train_batch_size must be >= 1, got {self.per_device_train_batch_size}; for a "
                f"larger effective batch without more memory, raise gradient_accumulation_steps."
            )
        if self.gradient_accumulation_steps < 1:
            raise ValueError(
                f"gradient_accumulation_steps must be >= 1 (1 = no accumulation), "
                f"got {self.gradient_accumulation_steps}."
            )
        if self.max_length < 2:
            raise ValueError(
                f"max_length must be >= 2 tokens (a prompt token and a completion token), got {self.max_length}."
            )
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm}; 1.0 is usual.")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}; use 0.0 for none.")
        if self.logging_steps < 1:
            raise ValueError(f"logging_steps must be >= 1, got {self.logging_steps}.")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (what ``training_jobs.config`` and ``sparring.json`` store)."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class TRLTrainingConfig(TrainingConfig):
    """Settings passed through to TRL's trainers (SFT, DPO, KTO)."""

    report_to: str | tuple[str, ...] = field(
        default="none",
        metadata={
            "help": 'Experiment trackers to report metrics to: "none", "tensorboard", "wandb", ... or a list of '
            "them (the tracker's package must be installed)."
        },
    )
    gradient_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "Recompute activations in the backward pass: less memory, about 20% slower. Off by default: "
            "the bundled 135M model fits without it."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.report_to, list):
            object.__setattr__(self, "report_to", tuple(self.report_to))
        targets = (self.report_to,) if isinstance(self.report_to, str) else self.report_to
        unknown = [t for t in targets if t not in REPORT_TARGETS]
        if unknown or not targets:
            raise ValueError(
                f"report_to {self.report_to!r} names no known tracker ({', '.join(unknown) or 'empty'}); "
                f"use one or more of {', '.join(REPORT_TARGETS)}."
            )
        if self.device.startswith("cuda:"):
            raise ValueError(
                f"device {self.device!r}: TRL's trainers place the model on the first visible GPU themselves. "
                f"Set device to cuda and choose the GPU with CUDA_VISIBLE_DEVICES={self.device.removeprefix('cuda:')}."
            )
        if "none" in targets and len(targets) > 1:
            raise ValueError(f'report_to {self.report_to!r} mixes "none" with trackers: use "none" alone or drop it.')

    def trl_arguments(self, *, output_dir: str, bf16: bool, use_cpu: bool) -> dict[str, Any]:
        """Keyword arguments of TRL's ``SFTConfig``, ``DPOConfig`` or ``KTOConfig``.

        Nothing is checkpointed (``save_strategy="no"``): the trainer function saves the
        adapter itself. TRL's own tqdm bar is off: progress goes to the caller's callback.
        """
        return {
            "output_dir": output_dir,
            "learning_rate": self.learning_rate,
            "num_train_epochs": self.num_train_epochs,
            "max_steps": self.max_steps,
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "max_length": self.max_length,
            "max_grad_norm": self.max_grad_norm,
            "weight_decay": self.weight_decay,
            "seed": self.seed,
            "data_seed": self.seed,
            "logging_steps": self.logging_steps,
            "report_to": list(self.report_to) if isinstance(self.report_to, tuple) else self.report_to,
            # transformers 5.23 renamed gradient_checkpointing (a deprecated alias now) to this
            "activation_checkpointing": self.gradient_checkpointing,
            "bf16": bf16,
            "fp16": False,
            "use_cpu": use_cpu,
            "save_strategy": "no",
            "disable_tqdm": True,
            **self.trainer_arguments(),
        }

    def trainer_arguments(self) -> dict[str, Any]:
        """Arguments of one TRL trainer's config (beta, loss_type...); subclasses add theirs."""
        return {}
