"""The trainer kinds, one row each: the train function, its config class, whether it learns
from a dataset snapshot of the logs (else online, from episodes it plays: GRPO), whether
it runs data-parallel under ``accelerate launch`` (TRL's Trainer on a fixed dataset), and
whether it trains a verifier (a reward model that fills judge seats) rather than a policy.

SFT, DPO and KTO are rows of one runner (``TRLDatasetTrainer``): a TRL trainer and the row
formats it reads. PPO is the offline loop of ``ppo.py``, GRPO the online one of ``grpo.py``,
and the reward model (verifier) TRL's RewardTrainer in ``reward.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from storage.models import DatasetKind
from training.trainers.base_config import TrainingConfig
from training.trainers.dpo_config import DPOTrainingConfig
from training.trainers.grpo import train_grpo
from training.trainers.grpo_config import GRPOTrainingConfig
from training.trainers.kto_config import KTOTrainingConfig
from training.trainers.ppo import train_ppo
from training.trainers.ppo_config import PPOTrainingConfig
from training.trainers.result import TrainResult
from training.trainers.reward import train_reward
from training.trainers.reward_config import RewardTrainingConfig
from training.trainers.sft_config import SFTTrainingConfig
from training.trainers.trl_runner import TRLDatasetTrainer

train_sft = TRLDatasetTrainer(
    DatasetKind.SFT, "SFTTrainer", SFTTrainingConfig, (("messages",), ("prompt", "completion"))
)
"""Supervised fine-tuning on conversations or prompt-completion rows (the SFT builder's formats)."""
train_dpo = TRLDatasetTrainer(DatasetKind.DPO, "DPOTrainer", DPOTrainingConfig, (("prompt", "chosen", "rejected"),))
"""Direct preference optimisation (optionally RPO) on preference pairs (the DPO builder's format)."""
train_kto = TRLDatasetTrainer(DatasetKind.KTO, "KTOTrainer", KTOTrainingConfig, (("prompt", "completion", "label"),))
"""KTO on unpaired, labelled completions (the KTO builder's format)."""


@dataclass(frozen=True)
class TrainerKind:
    name: str
    train: Callable[..., TrainResult]
    config_type: type[TrainingConfig]
    reads_snapshot: bool
    """learns from a dataset snapshot (rows of the logs); else from the episodes it plays"""
    data_parallel: bool
    """runs data-parallel when ``accelerate launch`` starts several processes"""
    verifier: bool = False
    """trains a verifier (a reward model that fills judge seats: ``verifier:NAME``), not a seat's policy"""


KINDS = {
    kind.name: kind
    for kind in (
        TrainerKind("sft", train_sft, SFTTrainingConfig, reads_snapshot=True, data_parallel=True),
        TrainerKind("dpo", train_dpo, DPOTrainingConfig, reads_snapshot=True, data_parallel=True),
        TrainerKind("kto", train_kto, KTOTrainingConfig, reads_snapshot=True, data_parallel=True),
        TrainerKind("ppo", train_ppo, PPOTrainingConfig, reads_snapshot=True, data_parallel=False),
        TrainerKind("grpo", train_grpo, GRPOTrainingConfig, reads_snapshot=False, data_parallel=False),
        TrainerKind("reward", train_reward, RewardTrainingConfig, reads_snapshot=True, data_parallel=True,
                    verifier=True),
    )
}


def trainer_kind(name: str) -> TrainerKind:
    """The row of a trainer kind; ValueError lists the kinds."""
    if name not in KINDS:
        raise ValueError(f"unknown trainer {name!r}; trainers: {', '.join(KINDS)}")
    return KINDS[name]


def kind_names(
    *, reads_snapshot: bool | None = None, data_parallel: bool | None = None, verifier: bool | None = False
) -> list[str]:
    """The names of the kinds that train a seat's policy (``verifier=True``: those that train a
    verifier; None: both), optionally only those that read a snapshot, or run data-parallel (or not)."""
    return [
        kind.name
        for kind in KINDS.values()
        if reads_snapshot in (None, kind.reads_snapshot) and data_parallel in (None, kind.data_parallel)
        and verifier in (None, kind.verifier)
    ]
