"""Settings of online GRPO (``train_grpo``), passed to TRL's ``GRPOConfig``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from training.trainers.base_config import TRLTrainingConfig

GRPO_REWARDS = ("first_turn", "episode")
"""Where a rollout's reward comes from (see ``GRPOTrainingConfig.reward``)."""


@dataclass(frozen=True, kw_only=True)
class GRPOTrainingConfig(TRLTrainingConfig):
    """Online GRPO: each step plays episodes of the real game with the adapter being trained
    in the role's seat, and reinforces the role's first turn by its group-relative reward.

    ``per_device_train_batch_size x gradient_accumulation_steps`` completions are generated per
    optimiser step: that many divided by ``num_generations`` tasks, each played
    ``num_generations`` times. ``max_length`` is not used (the prompt is whatever the game
    asked; GRPO does not truncate it).
    """

    sequences_per_row: ClassVar[int | None] = None  # a batch is its generations

    learning_rate: float = field(
        default=1e-5,
        metadata={"help": "Peak learning rate of AdamW on the LoRA parameters (RL wants less than SFT)."},
    )
    per_device_train_batch_size: int = field(
        default=8,
        metadata={"help": "Completions (episodes) per forward pass; with gradient_accumulation_steps, a multiple "
                  "of num_generations."},
    )
    num_generations: int = field(
        default=8,
        metadata={"help": "Episodes played per task and step (the GRPO group); >= 2, rewards are compared within it."},
    )
    max_completion_length: int = field(
        default=256,
        metadata={"help": "Most tokens the trained role generates per turn (its max_new_tokens during the rollouts)."},
    )
    temperature: float = field(
        default=1.0,
        metadata={"help": "Sampling temperature of the trained role during the rollouts (> 0: GRPO needs variety)."},
    )
    top_p: float = field(
        default=1.0,
        metadata={"help": "Nucleus sampling of the trained role during the rollouts, in (0, 1]."},
    )
    beta: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the KL penalty towards the base model (adapter disabled); 0 (TRL's default) skips "
            "the reference pass. DeepSeek-R1 used 0.001."
        },
    )
    epsilon: float = field(
        default=0.2,
        metadata={"help": "Clipping range of the importance ratio, as in PPO."},
    )
    reward: str = field(
        default="first_turn",
        metadata={
            "help": "first_turn: the credit the game's credit rule gives the role's first turn, the turn that is "
            "trained (as the dataset builders read it: actor: correct; critic: verdict_correct plus the improvement "
            "it led to; proposer: value share, less 1 if incoherent). episode: the episode's headline reward "
            "(math-reflection: final answer correct), which also depends on the other seats and the later turns."
        },
    )
    concurrency: int = field(
        default=64,
        metadata={"help": "Episodes played at once in a rollout (their model calls are batched together)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_generations < 2:
            raise ValueError(
                f"num_generations must be >= 2, got {self.num_generations}: GRPO compares the rewards of a task's "
                f"episodes with each other, and one episode has nothing to compare with."
            )
        batch = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if batch % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size x gradient_accumulation_steps ({batch}) must be a multiple of "
                f"num_generations ({self.num_generations}): each step plays whole groups of episodes. Set "
                f"per_device_train_batch_size to {self.num_generations} or a multiple of it."
            )
        if self.max_completion_length < 1:
            raise ValueError(f"max_completion_length must be >= 1, got {self.max_completion_length}.")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ValueError(
                f"temperature must be > 0, got {self.temperature}: greedy rollouts of a task are all alike, so "
                f"GRPO would have no differences to learn from. 1.0 is usual."
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}; 1.0 turns nucleus sampling off.")
        if not (self.beta >= 0 and math.isfinite(self.beta)):
            raise ValueError(f"beta must be >= 0, got {self.beta}; 0 turns the KL penalty off.")
        if not 0 < self.epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1), got {self.epsilon}; 0.2 is usual.")
        if self.reward not in GRPO_REWARDS:
            raise ValueError(f"reward {self.reward!r} is not one of {', '.join(GRPO_REWARDS)}.")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}.")

    @classmethod
    def trl_config_class(cls) -> type:
        from trl import GRPOConfig

        return GRPOConfig

    def _own_trl_arguments(self, *, output_dir: str, bf16: bool, use_cpu: bool) -> dict[str, Any]:
        arguments = super()._own_trl_arguments(output_dir=output_dir, bf16=bf16, use_cpu=use_cpu)
        del arguments["max_length"]  # GRPOConfig has none: prompts come from the game, completions are capped
        return arguments

    def trainer_arguments(self) -> dict[str, Any]:
        """GRPO-specific arguments of TRL's ``GRPOConfig``.

        ``temperature`` is also what TRL divides the logits by when it computes the policy's
        log-probabilities, so it must match the rollouts'. ``remove_unused_columns`` is off:
        the dataset's ``task_id`` column stays (the reward function does not need it, but
        TRL would otherwise drop columns it does not know).
        """
        return {
            "num_generations": self.num_generations,
            "max_completion_length": self.max_completion_length,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "beta": self.beta,
            "epsilon": self.epsilon,
            "remove_unused_columns": False,
        }
