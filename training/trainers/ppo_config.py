"""Settings of the offline clipped policy-gradient update (``train_ppo``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from training.trainers.base_config import TrainingConfig

OBJECTIVES = ("clipped", "reinforce")


@dataclass(frozen=True, kw_only=True)
class PPOTrainingConfig(TrainingConfig):
    """PPO's clipped surrogate (or REINFORCE with the builder's baseline) on logged samples,
    with a k3 KL penalty towards the base model.

    The learning rate is constant (no warm-up or decay): each run is a short update on one
    batch of logged samples. See ``training.trainers.ppo`` for the loss.
    """

    objective: str = field(
        default="clipped",
        metadata={
            "help": "'clipped': PPO's clipped surrogate, importance-weighted against the logged behaviour "
            "logprobs (no token's probability moves past the clip range for a gain); 'reinforce': the "
            "advantage times the completion's log-probability, no ratio and no clip (REINFORCE with the "
            "builder's group baseline), which keeps learning over several epochs of one batch."
        },
    )
    skip_zero_advantage: bool = field(
        default=True,
        metadata={
            "help": "Leave out rows whose advantage is zero (their group's samples all scored alike): they "
            "would cost a forward and backward pass each for the KL term alone. When every row's advantage "
            "is zero, all are kept."
        },
    )

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
    clip_eps_high: float | None = field(
        default=None,
        metadata={
            "help": "Upper end of the ratio's clip for the clipped objective, 1 + clip_eps_high (None: clip_eps). "
            "A large value (say 10) lets a right answer's tokens keep rising while a wrong one's fall by at "
            "most clip_eps."
        },
    )
    kl_coef: float = field(
        default=0.05,
        metadata={"help": "Weight of the per-token KL(policy || base model) penalty (k3 estimator); 0 turns it off."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}.")
        if not 0 < self.clip_eps < 1:
            raise ValueError(f"clip_eps must be in (0, 1), got {self.clip_eps}; 0.2 is PPO's usual value.")
        if self.clip_eps_high is not None and not (0 < self.clip_eps_high < math.inf):
            raise ValueError(f"clip_eps_high must be a finite number > 0 (10 leaves a right answer's tokens free to "
                             f"rise) or None (clip_eps), got {self.clip_eps_high}.")
        if not (self.kl_coef >= 0 and math.isfinite(self.kl_coef)):
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}; use 0 to turn the KL penalty off.")
