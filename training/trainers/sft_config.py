"""Settings of supervised fine-tuning (``train_sft``), passed to TRL's ``SFTConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from training.trainers.base_config import TRLTrainingConfig


@dataclass(frozen=True, kw_only=True)
class SFTTrainingConfig(TRLTrainingConfig):
    """SFT on the rows of the SFT builder (rejection sampling).

    The loss covers what TRL's format rules say: the completion only for
    ``{"prompt", "completion"}`` rows, the whole conversation for ``{"messages"}`` rows (the
    bundled chat template has no ``{% generation %}`` markers, so TRL's
    ``assistant_only_loss`` is not offered).
    """

    learning_rate: float = field(
        default=2e-4,
        metadata={"help": "Peak learning rate of AdamW on the LoRA parameters (2e-4 improved the bundled model)."},
    )

    group_by_length: bool = field(
        default=True,
        metadata={"help": "Batch rows of similar length together (transformers' length-grouped sampler: "
                          "shuffled mega-batches, sorted within), so less of each batch is padding; "
                          "false: plain random order."},
    )

    def trainer_arguments(self) -> dict[str, Any]:
        return {"train_sampling_strategy": "group_by_length" if self.group_by_length else "random"}

    @classmethod
    def trl_config_class(cls) -> type:
        from trl import SFTConfig

        return SFTConfig
