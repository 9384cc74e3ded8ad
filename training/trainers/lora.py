"""LoRA settings, loading the base model for training, and starting the adapter to train.

Every trainer trains exactly one LoRA adapter (named ``default`` inside PEFT) on a frozen
base model: either a fresh adapter shaped by ``LoraSettings``, or a copy of a parent
adapter read from its folder (``PeftModel.from_pretrained(..., is_trainable=True)``), which
keeps the parent's own shape. Only ``lora_`` parameters are trainable, so training one
role's adapter can change no other weights; the parent folder is only read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from graphs.policies.adapter_folder import is_size_mismatch, load_failure, read_lora_config
from graphs.policies.base_models import load_model, resolve_device
from training.trainers.errors import AdapterMismatchError

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

LORA_PARAMETER_MARK = "lora_"
"""Every trainable parameter's name holds this (PEFT names them ``...lora_A.default.weight``)."""


@dataclass(frozen=True, kw_only=True)
class LoraSettings:
    """The shape of a fresh LoRA adapter (ignored when continuing a parent adapter, which
    keeps the shape it was trained with)."""

    r: int = field(default=16, metadata={"help": "Rank of the low-rank update matrices."})
    alpha: float = field(default=32.0, metadata={"help": "Scaling numerator: the update is multiplied by alpha / r."})
    dropout: float = field(
        default=0.0,
        metadata={
            "help": "Dropout on the LoRA input, in [0, 1). Off by default: on CPU, drawing its masks (one per "
            "adapted layer) costs a noticeable share of an SFT step, and adapters trained without it did as "
            "well (docs/results/2026-11-25-main-job.md). TRL's DPO and KTO trainers and the PPO update turn it off anyway (so that policy and "
            "reference log-probabilities are comparable); it acts in SFT."
        },
    )
    target_modules: str | tuple[str, ...] = field(
        default="all-linear",
        metadata={
            "help": 'Modules to adapt: "all-linear" (every linear layer but the output head) or a list of '
            'module names such as ["q_proj", "v_proj"].'
        },
    )
    peft: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Further arguments of PEFT's LoraConfig, passed as they are: use_rslora, use_dora, "
            "init_lora_weights, layers_to_transform, rank_pattern, ... Those above (as r, lora_alpha, "
            "lora_dropout, target_modules) and those that would train weights outside the adapter are refused."
        },
    )

    def __post_init__(self) -> None:
        if isinstance(self.target_modules, list):
            object.__setattr__(self, "target_modules", tuple(self.target_modules))
        if self.r < 1:
            raise ValueError(f"lora.r must be >= 1 (the adapter's rank), got {self.r}; 8 to 64 is usual.")
        if self.alpha <= 0:
            raise ValueError(f"lora.alpha must be > 0, got {self.alpha}; twice r is a common choice.")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout}; use 0.0 to turn it off.")
        if not self.target_modules:
            raise ValueError('lora.target_modules is empty: use "all-linear" or name the modules to adapt.')
        if self.peft:
            _check_peft_arguments(self.peft)
        if "lm_head" in self.target_modules:
            raise ValueError(
                "lora.target_modules must not include lm_head: TRL's DPO and KTO trainers compute "
                "log-probabilities from lm_head.weight directly, so an adapter there is never trained. "
                'Use "all-linear", which leaves the output head out.'
            )

    def to_peft(self) -> LoraConfig:
        """The PEFT ``LoraConfig`` of a fresh adapter for a causal language model."""
        from peft import LoraConfig

        modules = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=modules,
            bias="none",
            task_type="CAUSAL_LM",
            **self.peft,
        )


PEFT_OWN = {"r": "r", "lora_alpha": "alpha", "lora_dropout": "dropout", "target_modules": "target_modules",
            "task_type": None}
"""LoraConfig arguments set from LoraSettings' own fields (the field's name), or by sparring (None)."""
PEFT_REFUSED = ("bias", "modules_to_save", "trainable_token_indices")
"""LoraConfig arguments that make weights outside the LoRA matrices trainable: the base model, shared
by every role, must stay frozen."""


def _check_peft_arguments(arguments: dict[str, Any]) -> None:
    import dataclasses
    import difflib

    from peft import LoraConfig

    valid = {f.name for f in dataclasses.fields(LoraConfig) if f.init}
    for key in arguments:
        if key in PEFT_OWN:
            where = f"set it as lora.{PEFT_OWN[key]}" if PEFT_OWN[key] else "sparring sets it itself"
            raise ValueError(f"lora.peft.{key}: LoraConfig's {key!r} is not passed through ({where}).")
        if key in PEFT_REFUSED:
            raise ValueError(
                f"lora.peft.{key} would train weights outside the LoRA adapter, which every role shares with the "
                f"frozen base model: leave it out."
            )
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(f"lora.peft.{key} is not an argument of PEFT's LoraConfig{hint}")


def load_base_model(model: str, *, cache_dir: Path, device: str,
                    precision: str = "auto") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The base model to train on, in ``precision`` (``TrainingConfig.precision``; "auto":
    float32 on CPU, bfloat16 on CUDA)."""
    return load_model(model, cache_dir=cache_dir, device=device, dtype=precision)


def uses_cpu(device: str) -> bool:
    """Whether a configured device (auto, cpu, cuda, cuda:N, mps) resolves to the CPU."""
    return resolve_device(device).type == "cpu"


def attach_adapter(model: PreTrainedModel, lora: LoraSettings, parent: Path | None) -> PeftModel:
    """Wrap ``model`` with the one adapter to train: fresh, or a trainable copy of ``parent``.

    ``parent`` must have passed ``check_parent_adapter``. Its shapes are checked again by
    PEFT; a mismatch (an adapter of another architecture, or a rank ``r`` other than the one it
    was trained with) becomes ``AdapterMismatchError``, in one line (``load_failure``).
    """
    from peft import PeftModel, get_peft_model

    if parent is None:
        peft_model = get_peft_model(model, lora.to_peft())
    else:
        try:
            peft_model = PeftModel.from_pretrained(model, parent, is_trainable=True)
        except (RuntimeError, ValueError, KeyError) as exc:
            rank = read_lora_config(parent, label=f"The parent adapter in {parent}").get("r")
            # a size mismatch is summed up in the message: chained, its full text would show in tracebacks
            cause = None if is_size_mismatch(exc) else exc
            raise AdapterMismatchError(
                f"The parent adapter in {parent} does not fit the base model: {load_failure(exc, rank)}. "
                "Continue from an adapter trained on this base model, or start a fresh adapter (no parent)."
            ) from cause
    require_frozen_base(peft_model)
    return peft_model


def require_frozen_base(model: torch.nn.Module) -> None:
    """Raise if any trainable parameter is not a LoRA parameter (the base must stay frozen)."""
    stray = [name for name, p in model.named_parameters() if p.requires_grad and LORA_PARAMETER_MARK not in name]
    if stray:
        raise RuntimeError(
            f"Parameters outside the LoRA adapter are trainable ({', '.join(stray[:3])}...): training would "
            f"change the base model that every role shares. Freeze them before training."
        )
