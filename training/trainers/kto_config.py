"""Settings of KTO (``train_kto``), passed to TRL's ``KTOConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from training.trainers.base_config import TRLTrainingConfig

KTO_LOSS_TYPES = ("kto", "apo_zero_unpaired")
"""The loss types of TRL 1.16's ``KTOTrainer``."""


@dataclass(frozen=True, kw_only=True)
class KTOTrainingConfig(TRLTrainingConfig):
    """KTO on unpaired desirable / undesirable completions.

    The "kto" loss estimates its KL term from mismatched prompt/completion pairs within a
    batch, so it needs ``per_device_train_batch_size >= 2`` (TRL's rule). TRL's KTO reads the
    data in order (``train_sampling_strategy="sequential"``), it does not shuffle.
    """

    sequences_per_row: ClassVar[int | None] = 2  # each completion and its KL counterpart
    min_batch: ClassVar[int] = 2

    learning_rate: float = field(
        default=5e-5,
        metadata={"help": "Peak learning rate of AdamW on the LoRA parameters."},
    )
    beta: float = field(
        default=0.1,
        metadata={"help": "Strength of the pull towards the reference policy: higher stays closer."},
    )
    loss_type: str = field(
        default="kto",
        metadata={"help": f"TRL's KTO loss: {' or '.join(KTO_LOSS_TYPES)}."},
    )
    desirable_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight of the desirable rows' loss; with unequal counts, keep desirable_weight x "
            "n_desirable / (undesirable_weight x n_undesirable) between 1 and 4/3 (KTO paper)."
        },
    )
    undesirable_weight: float = field(
        default=1.0,
        metadata={"help": "Weight of the undesirable rows' loss (see desirable_weight)."},
    )

    @classmethod
    def trl_config_class(cls) -> type:
        from trl import KTOConfig

        return KTOConfig

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.beta > 0:
            raise ValueError(f"beta must be > 0, got {self.beta}; 0.1 is usual, higher keeps closer to the reference.")
        if self.loss_type not in KTO_LOSS_TYPES:
            raise ValueError(
                f"loss_type {self.loss_type!r} is not a KTO loss of TRL; use one of {', '.join(KTO_LOSS_TYPES)}."
            )
        if not (self.desirable_weight > 0 and self.undesirable_weight > 0):
            raise ValueError(
                f"desirable_weight and undesirable_weight must be > 0, got {self.desirable_weight} and "
                f"{self.undesirable_weight}; 1.0 each weighs both kinds of rows equally."
            )
        if self.loss_type == "kto" and self.per_device_train_batch_size < 2:
            raise ValueError(
                f"loss_type kto needs per_device_train_batch_size >= 2 (got {self.per_device_train_batch_size}): "
                f"it estimates its KL term from other rows of the same batch. Raise the batch size (lower "
                f"gradient_accumulation_steps to keep the effective batch), or use loss_type apo_zero_unpaired."
            )

    def trainer_arguments(self) -> dict[str, Any]:
        """KTO-specific arguments of TRL's ``KTOConfig``."""
        return {
            "beta": self.beta,
            "loss_type": self.loss_type,
            "desirable_weight": self.desirable_weight,
            "undesirable_weight": self.undesirable_weight,
        }
