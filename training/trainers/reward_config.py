"""Settings of a trained verifier (``train_reward``), passed to TRL's ``RewardConfig``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from training.trainers.base_config import TRLTrainingConfig


@dataclass(frozen=True, kw_only=True)
class RewardTrainingConfig(TRLTrainingConfig):
    """A reward model (verifier) on the reward builder's rows: the base model with a one-score
    head, a LoRA adapter on its layers, and the head trained beside it (saved in the adapter).

    TRL's RewardTrainer learns from pairs (Bradley-Terry: the correct answer of a pair should
    score above the incorrect one). Labelled rows are paired within each difficulty level, so
    that both answers of every pair are equally hard and difficulty cannot separate them. TRL
    turns dropout off while training a reward model (``disable_dropout``).
    """

    sequences_per_row: ClassVar[int | None] = 2  # the pair's two answers

    learning_rate: float = field(
        default=1e-4,
        metadata={"help": "Peak learning rate of AdamW on the LoRA parameters and the score head (TRL's default)."},
    )

    @classmethod
    def trl_config_class(cls) -> type:
        from trl import RewardConfig

        return RewardConfig
