"""Settings every trainer shares; each trainer's config (``X_config.py``) extends one of these.

``TrainingConfig`` holds what any LoRA training run needs; ``TRLTrainingConfig`` adds what is
passed through to TRL's trainers (SFT, DPO, KTO, GRPO, Reward). Every field has help text
(``metadata["help"]``); ``__post_init__`` rejects values that cannot work, saying how to fix
them. Configs are plain data: ``to_dict()`` is what ``training_jobs.config`` and
``sparring.json`` store.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

from graphs.policies.base_models import BUNDLED
from training.trainers.lora import LoraSettings

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
MAX_LEARNING_RATE = 1e-2
"""Above it Adam moves each LoRA weight by about this much a step, as large as the weights
themselves: training diverges, so such a rate is a typo (5 for 5e-5) rather than a choice."""
PRECISIONS = ("auto", "float32", "bfloat16")
"""``TrainingConfig.precision`` values: auto follows ``load_model`` (float32 on a CPU, bfloat16 on CUDA)."""
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
    precision: str = field(
        default="auto",
        metadata={"help": "Precision of the frozen base model's weights while training: auto (float32 on a CPU, "
                          "bfloat16 on CUDA), float32 or bfloat16. The LoRA weights and the optimiser stay float32 "
                          "either way. On a CPU, bfloat16 halves the base model's memory; whether it is faster "
                          "depends on the CPU (bench/sft_throughput.py measures it)."},
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
    report_to: str | tuple[str, ...] = field(
        default="none",
        metadata={
            "help": 'Experiment trackers that get each log entry: "none", "tensorboard", "wandb", ... or a list '
            "of them (the tracker's package must be installed); every trainer, the PPO loop included."
        },
    )
    logging_dir: str | None = field(
        default=None,
        metadata={
            "help": "Folder of TensorBoard's event files (a sub-folder <kind>-<role>-<time> per run). None: "
            "transformers' default (TENSORBOARD_LOGGING_DIR, else inside the trainer's output folder, which a "
            "training job deletes)."
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.lora, dict):
            object.__setattr__(self, "lora", LoraSettings(**self.lora))
        if not self.model:
            raise ValueError('model is empty: use "bundled", a local model folder or a Hugging Face model id.')
        if not _DEVICE.match(self.device):
            raise ValueError(f"device {self.device!r} is not a device: use auto, cpu, cuda, cuda:N or mps.")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r} is not one of {', '.join(PRECISIONS)}.")
        if not (self.learning_rate > 0 and math.isfinite(self.learning_rate)):
            raise ValueError(
                f"learning_rate must be a positive number, got {self.learning_rate}; LoRA usually trains "
                f"with 1e-5 to 2e-4."
            )
        if self.learning_rate > MAX_LEARNING_RATE:
            raise ValueError(
                f"learning_rate {self.learning_rate} is above {MAX_LEARNING_RATE}: LoRA training diverges within "
                f"a few steps at that size; LoRA usually trains with 1e-5 to 2e-4."
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
        if isinstance(self.report_to, list):
            object.__setattr__(self, "report_to", tuple(self.report_to))
        targets = (self.report_to,) if isinstance(self.report_to, str) else self.report_to
        unknown = [t for t in targets if t not in REPORT_TARGETS]
        if unknown or not targets:
            raise ValueError(
                f"report_to {self.report_to!r} names no known tracker ({', '.join(unknown) or 'empty'}); "
                f"use one or more of {', '.join(REPORT_TARGETS)}."
            )
        if ("none" in targets or "all" in targets) and len(targets) > 1:
            raise ValueError(
                f'report_to {self.report_to!r} mixes "none" or "all" with trackers: use it alone or drop it.'
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (what ``training_jobs.config`` and ``sparring.json`` store)."""
        return asdict(self)

    def split_across(self, processes: int) -> TrainingConfig:
        """The settings of each of ``processes`` data-parallel processes, with the same effective
        batch (rows per optimiser step) as these in one: the accumulation, else the batch, divided
        among them, so the steps, and the recipe, stay those of one process. ValueError when
        neither divides."""
        if processes == 1:
            return self
        batch, accumulation = self.per_device_train_batch_size, self.gradient_accumulation_steps
        if accumulation % processes == 0:
            return replace(self, gradient_accumulation_steps=accumulation // processes)
        if batch % processes == 0:
            return replace(self, per_device_train_batch_size=batch // processes)
        raise ValueError(
            f"an optimiser step of {batch} x {accumulation} rows (per_device_train_batch_size x "
            f"gradient_accumulation_steps) does not split among {processes} processes: make either a multiple "
            f"of {processes}, or train with as many processes as divide one of them"
        )


@dataclass(frozen=True, kw_only=True)
class TRLTrainingConfig(TrainingConfig):
    """Settings passed through to TRL's trainers (SFT, DPO, KTO, GRPO, Reward); PPO is our own loop."""

    gradient_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "Recompute activations in the backward pass: less memory, slower steps. Off by default: "
            "the bundled 135M model fits without it."
        },
    )
    max_batch_tokens: int | None = field(
        default=1024,
        metadata={
            "help": "Most tokens one forward pass may hold (rows x sequences per row x the longest row's tokens): "
            "a larger batch is split into smaller ones with gradient accumulation, the same effective batch in "
            "less memory (docs/results/2026-11-27-benchmarks.md). None: never split."
        },
    )
    trl: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Further arguments of TRL's config class (SFTConfig, DPOConfig, KTOConfig, GRPOConfig), passed "
            "as they are: warmup_ratio, lr_scheduler_type, max_prompt_length, ... Those set by the fields above "
            "or by sparring itself (output_dir, save_strategy, report_to...) are refused."
        },
    )

    sequences_per_row: ClassVar[int | None] = 1
    """Sequences a row puts in the forward pass (a DPO row: chosen and rejected); None: its
    batches are never split (GRPO's are its generations)."""
    min_batch: ClassVar[int] = 1
    """The smallest batch the trainer accepts (KTO's KL term needs 2)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_batch_tokens is not None and self.max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1 or None (never split a batch), got "
                             f"{self.max_batch_tokens}.")
        if self.device.startswith("cuda:"):
            raise ValueError(
                f"device {self.device!r}: TRL's trainers place the model on the first visible GPU themselves. "
                f"Set device to cuda and choose the GPU with CUDA_VISIBLE_DEVICES={self.device.removeprefix('cuda:')}."
            )
        if self.trl:
            self._check_trl_arguments()

    @property
    def may_split(self) -> bool:
        """Whether ``split_for`` can make the batch smaller: worth measuring the rows for."""
        return (self.max_batch_tokens is not None and self.sequences_per_row is not None
                and self.per_device_train_batch_size > self.min_batch)

    def split_for(self, longest_row: int) -> TRLTrainingConfig:
        """These settings with the batch split to fit ``max_batch_tokens`` when rows reach
        ``longest_row`` tokens (at most ``max_length``): the largest divisor of the batch that fits
        (at least ``min_batch``), with gradient accumulation raised to keep the effective batch."""
        if not self.may_split:
            return self
        per_row = self.sequences_per_row * min(longest_row, self.max_length)
        batch = self.per_device_train_batch_size
        divisors = [d for d in range(self.min_batch, batch + 1) if batch % d == 0]
        fitting = [d for d in divisors if d * per_row <= self.max_batch_tokens]
        smaller = max(fitting) if fitting else min(divisors, default=batch)
        if smaller == batch:
            return self
        return replace(self, per_device_train_batch_size=smaller,
                       gradient_accumulation_steps=self.gradient_accumulation_steps * batch // smaller)

    @classmethod
    def trl_config_class(cls) -> type:
        """TRL's config class these settings become (``SFTConfig``...); each trainer's config names its own."""
        raise NotImplementedError(f"{cls.__name__} names no TRL config class")

    def _check_trl_arguments(self) -> None:
        import dataclasses
        import difflib

        trl_class = self.trl_config_class()
        valid = {f.name for f in dataclasses.fields(trl_class) if f.init}
        own = self._own_trl_arguments(output_dir="", bf16=False, use_cpu=True)
        own_fields = {f.name for f in dataclasses.fields(self)}
        for key in self.trl:
            if key in own or key in own_fields:
                where = f"set it as {key!r} at the top level" if key in own_fields else "sparring sets it itself"
                raise ValueError(f"trl.{key}: {trl_class.__name__}'s {key!r} is not passed through ({where}).")
            if key not in valid:
                close = difflib.get_close_matches(key, valid, n=3)
                hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
                raise ValueError(
                    f"trl.{key} is not an argument of TRL's {trl_class.__name__}{hint} (its arguments are the fields "
                    f"of trl.{trl_class.__name__})."
                )

    def trl_arguments(self, *, output_dir: str, bf16: bool, use_cpu: bool) -> dict[str, Any]:
        """Keyword arguments of TRL's ``SFTConfig``, ``DPOConfig``, ``KTOConfig`` or ``GRPOConfig``:
        sparring's own, then those of ``trl`` (which never name one of sparring's).

        Nothing is checkpointed (``save_strategy="no"``): the trainer function saves the
        adapter itself. TRL's own tqdm bar is off: progress goes to the caller's callback.
        """
        return {**self._own_trl_arguments(output_dir=output_dir, bf16=bf16, use_cpu=use_cpu), **self.trl}

    def _own_trl_arguments(self, *, output_dir: str, bf16: bool, use_cpu: bool) -> dict[str, Any]:
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
            "report_to": self.trl_report_to(),
            # transformers 5.23 renamed gradient_checkpointing (a deprecated alias now) to this
            "activation_checkpointing": self.gradient_checkpointing,
            "bf16": bf16,
            "fp16": False,
            "use_cpu": use_cpu,
            "save_strategy": "no",
            "disable_tqdm": True,
            **self.trainer_arguments(),
        }

    def trl_report_to(self) -> list[str] | str:
        """``report_to`` of TRL's config: TensorBoard is left out when ``logging_dir`` is set (the
        runner then adds a TensorBoard callback writing there, ``reporting.tracker_callbacks``)."""
        from training.trainers.reporting import TENSORBOARD, targets

        names = targets(self.report_to)
        if self.logging_dir is not None:
            names = [name for name in names if name != TENSORBOARD]
        return names or "none"

    def trainer_arguments(self) -> dict[str, Any]:
        """Arguments of one TRL trainer's config (beta, loss_type...); subclasses add theirs."""
        return {}
