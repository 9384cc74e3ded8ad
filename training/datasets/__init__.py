"""Dataset builders: the logs of played games as TRL's conversational dataset formats.

``build_snapshot`` reads the succeeded episodes of a game (``reading``), assigns credit to
the role's turns (``credit``), makes rows of one trainer kind (``preference`` for DPO,
``unpaired`` for KTO, ``policy_gradient`` for PPO / GRPO-style, ``sft``, ``reward_model``),
writes them to a JSONL file and registers a ``dataset_snapshots`` row; ``load_snapshot``
gives them back as a ``datasets.Dataset``. Each module's docstring states its rules.
"""

from training.datasets.building import BuildContext, Builder
from training.datasets.credit import turn_credits
from training.datasets.errors import (
    DatasetError,
    DatasetMismatchError,
    EmptyDatasetError,
    EvaluationDataError,
    SnapshotFileError,
    SnapshotNotFoundError,
)
from training.datasets.policy_gradient import PolicyGradientRows, PPOOptions
from training.datasets.preference import DPOOptions, PreferencePairs
from training.datasets.reading import EpisodeLog, LogFilter, LoggedTurn, ReadPlan, read_episodes
from training.datasets.reward_model import BalancedRewardRows, RewardOptions
from training.datasets.sft import RejectionSampling, SFTOptions
from training.datasets.snapshots import BUILDERS, BuilderOptions, SnapshotResult, build_snapshot, load_snapshot
from training.datasets.unpaired import KTOOptions, UnpairedPreferences

__all__ = [
    "BUILDERS",
    "BalancedRewardRows",
    "BuildContext",
    "Builder",
    "BuilderOptions",
    "DPOOptions",
    "DatasetError",
    "DatasetMismatchError",
    "EmptyDatasetError",
    "EpisodeLog",
    "EvaluationDataError",
    "KTOOptions",
    "LogFilter",
    "LoggedTurn",
    "PPOOptions",
    "PolicyGradientRows",
    "PreferencePairs",
    "ReadPlan",
    "RejectionSampling",
    "RewardOptions",
    "SFTOptions",
    "SnapshotFileError",
    "SnapshotNotFoundError",
    "SnapshotResult",
    "UnpairedPreferences",
    "build_snapshot",
    "load_snapshot",
    "read_episodes",
    "turn_credits",
]
