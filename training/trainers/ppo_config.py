"""Settings of the offline clipped policy-gradient update (``train_ppo``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from training.trainers.base_config import TrainingConfig


@dataclass(frozen=True, kw_only=True)
class PPOTrainingConfig(TrainingConfig):
    """PPO's clipped surrogate on logged samples, with a k3 KL penalty towards the base model.

    The learning rate is constant (no warm-up or decay): each run is a short update on one
    batch of logged samples. See ``training.trainers.ppo`` for the loss.
    """

    learning_rate: float = field(
        default=1e-5,
        metadata={"help": "Learning rate of AdamW on the LoRA parameters (constant)."},
    )
    clip_eps: float = field(
        default=0.2,
        metadata={
            "help": "The importance ratio new/behaviour probability is clipped to [1 - clip_eps, 1 + clip_eps] "
            "in the surrogate, so one update cannot move far from the policy that generated the samples."
        },
    )
    kl_coef: float = field(
        default=0.05,
        metadata={"help": "Weight of the per-token KL(policy || base model) penalty (k3 estimator); 0 turns it off."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.clip_eps < 1:
            raise ValueError(f"clip_eps must be in (0, 1), got {self.clip_eps}; 0.2 is PPO's usual value.")
        if not (self.kl_coef >= 0 and math.isfinite(self.kl_coef)):
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}; use 0 to turn the KL penalty off.")
