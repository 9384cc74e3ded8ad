"""LoRA trainers: one adapter per learner role, trained on a frozen base model.

``train_sft``, ``train_dpo`` and ``train_kto`` configure TRL's trainers, ``train_grpo`` runs
TRL's GRPO online on rollouts of a game; ``train_ppo`` is an
offline clipped policy-gradient update on logged samples (TRL 1.16 has no PPOTrainer).
``kinds`` holds them in one table (``trainer_kind(name)``). Each takes the rows of the
matching dataset builder (``training.datasets``), a config (``X_config.py``), the role, a new
output folder and optionally a parent adapter to continue from, and returns a ``TrainResult``.
The output folder gets the adapter and ``sparring.json`` (see ``training.adapter_folders``);
nothing else is written.
"""

from training.adapter_folders import AdapterMetadata, check_parent_adapter, read_metadata
from training.trainers.base_config import TrainingConfig, TRLTrainingConfig
from training.trainers.dpo_config import DPOTrainingConfig
from training.trainers.errors import (
    AdapterError,
    AdapterMismatchError,
    DatasetColumnsError,
    EmptyTrainingDataError,
    OutputExistsError,
    TrainerError,
    TrainingDivergedError,
)
from training.trainers.grpo import train_grpo
from training.trainers.grpo_config import GRPOTrainingConfig
from training.trainers.kinds import TrainerKind, kind_names, train_dpo, train_kto, train_sft, trainer_kind
from training.trainers.kto_config import KTOTrainingConfig
from training.trainers.lora import LoraSettings
from training.trainers.ppo import completion_logprobs, train_ppo
from training.trainers.ppo_config import PPOTrainingConfig
from training.trainers.progress import ProgressCallback, ProgressFn
from training.trainers.result import TrainResult
from training.trainers.sft_config import SFTTrainingConfig

__all__ = [
    "AdapterError",
    "AdapterMetadata",
    "AdapterMismatchError",
    "DPOTrainingConfig",
    "DatasetColumnsError",
    "EmptyTrainingDataError",
    "GRPOTrainingConfig",
    "KTOTrainingConfig",
    "LoraSettings",
    "OutputExistsError",
    "PPOTrainingConfig",
    "ProgressCallback",
    "ProgressFn",
    "SFTTrainingConfig",
    "TRLTrainingConfig",
    "TrainResult",
    "TrainerKind",
    "TrainerError",
    "TrainingConfig",
    "TrainingDivergedError",
    "check_parent_adapter",
    "completion_logprobs",
    "kind_names",
    "read_metadata",
    "train_dpo",
    "train_grpo",
    "train_kto",
    "train_ppo",
    "train_sft",
    "trainer_kind",
]
