"""Settings of DPO (``train_dpo``), passed to TRL's ``DPOConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from training.trainers.base_config import TRLTrainingConfig

DPO_LOSS_TYPES = (
    "sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard",
    "aot", "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm",
)  # fmt: skip
"""The loss types of TRL 1.16's ``DPOTrainer``."""
LABEL_SMOOTHING_LOSSES = ("robust", "exo_pair")


@dataclass(frozen=True, kw_only=True)
class DPOTrainingConfig(TRLTrainingConfig):
    """DPO on preference pairs, optionally with an NLL term on the chosen side (RPO).

    TRL 1.16 has no ``rpo_alpha`` field any more: RPO is its loss combination
    ``loss_type=[loss_type, "sft"]`` with ``loss_weights=[1.0, rpo_alpha]``, where "sft" is the
    token-mean negative log-likelihood of the chosen completions. ``rpo_alpha`` here maps to it.
    When continuing a parent adapter, the reference policy is the parent (TRL keeps a frozen
    copy of it); for a fresh adapter, it is the base model.
    """

    sequences_per_row: ClassVar[int | None] = 2  # chosen and rejected

    learning_rate: float = field(
        default=5e-5,
        metadata={"help": "Peak learning rate of AdamW on the LoRA parameters."},
    )
    beta: float = field(
        default=0.1,
        metadata={"help": "Strength of the pull towards the reference policy: higher stays closer (IPO: its tau)."},
    )
    loss_type: str = field(
        default="sigmoid",
        metadata={"help": f"TRL's DPO loss: {', '.join(DPO_LOSS_TYPES)}. sigmoid is the DPO paper's."},
    )
    rpo_alpha: float | None = field(
        default=None,
        metadata={
            "help": "Weight of the NLL loss on the chosen completions added to the preference loss (RPO, "
            "arxiv 2404.19733; the paper uses 1.0). None or 0 adds nothing."
        },
    )
    label_smoothing: float = field(
        default=0.0,
        metadata={
            "help": "For loss_type robust: the probability that a preference label is flipped, in [0, 0.5). "
            "For exo_pair: its epsilon, > 0 (1e-3 recommended). Must stay 0 with other losses."
        },
    )

    @classmethod
    def trl_config_class(cls) -> type:
        from trl import DPOConfig

        return DPOConfig

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.beta > 0:
            raise ValueError(f"beta must be > 0, got {self.beta}; 0.1 is usual, higher keeps closer to the reference.")
        if self.loss_type not in DPO_LOSS_TYPES:
            raise ValueError(
                f"loss_type {self.loss_type!r} is not a DPO loss of TRL; use one of {', '.join(DPO_LOSS_TYPES)}."
            )
        if self.rpo_alpha is not None and not self.rpo_alpha >= 0:
            raise ValueError(
                f"rpo_alpha must be >= 0 (the weight of the chosen-side NLL), got {self.rpo_alpha}; use None "
                f"or 0 for plain DPO, 1.0 as in the RPO paper."
            )
        if self.loss_type == "sft" and self.rpo_alpha:
            raise ValueError(
                'loss_type "sft" is already the chosen-side NLL, and rpo_alpha would add it a second time: '
                "set rpo_alpha to None, or choose a preference loss such as sigmoid."
            )
        if self.loss_type == "exo_pair" and not self.label_smoothing > 0:
            raise ValueError("loss_type exo_pair needs label_smoothing > 0: set it to 1e-3 as the EXO paper does.")
        if self.loss_type == "robust" and not 0 <= self.label_smoothing < 0.5:
            raise ValueError(
                f"loss_type robust needs label_smoothing in [0, 0.5) (the label flip rate), got {self.label_smoothing}."
            )
        if self.loss_type not in LABEL_SMOOTHING_LOSSES and self.label_smoothing != 0:
            raise ValueError(
                f"label_smoothing {self.label_smoothing} has no effect with loss_type {self.loss_type!r}: set it to "
                f"0, or use loss_type robust or exo_pair."
            )

    def trainer_arguments(self) -> dict[str, Any]:
        """DPO-specific arguments of TRL's ``DPOConfig`` (RPO as the "sft" loss with weight rpo_alpha)."""
        arguments: dict[str, Any] = {"beta": self.beta, "label_smoothing": self.label_smoothing}
        if self.rpo_alpha:
            arguments.update(loss_type=[self.loss_type, "sft"], loss_weights=[1.0, self.rpo_alpha])
        else:
            arguments.update(loss_type=[self.loss_type])
        return arguments
