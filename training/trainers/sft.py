"""Supervised fine-tuning of one role's LoRA adapter with TRL's ``SFTTrainer``."""

from __future__ import annotations

from pathlib import Path

from storage.models import DatasetKind
from training.trainers.data import TrainingRows, as_dataset, require_columns
from training.trainers.progress import ProgressFn
from training.trainers.result import TrainResult
from training.trainers.sft_config import SFTTrainingConfig
from training.trainers.trl_runner import train_with_trl

SFT_COLUMNS = (("messages",), ("prompt", "completion"))
"""TRL's conversational language-modelling or prompt-completion rows (the SFT builder's formats)."""


def train_sft(
    rows: TrainingRows,
    config: SFTTrainingConfig | None = None,
    *,
    role: str,
    output_dir: Path,
    cache_dir: Path,
    parent_adapter: Path | None = None,
    dataset_snapshot_id: int | None = None,
    progress: ProgressFn | None = None,
) -> TrainResult:
    """Train ``role``'s adapter on SFT rows and write it to ``output_dir`` (which must not hold files).

    ``parent_adapter``: continue from this adapter folder (it is only read) instead of a
    fresh adapter. ``progress(step, total)`` is called after every optimiser step.
    """
    config = config or SFTTrainingConfig()
    dataset = as_dataset(rows, DatasetKind.SFT)
    require_columns(dataset, DatasetKind.SFT, *SFT_COLUMNS)
    from trl import SFTConfig, SFTTrainer

    return train_with_trl(
        kind=DatasetKind.SFT,
        trainer_cls=SFTTrainer,
        args_cls=SFTConfig,
        dataset=dataset,
        config=config,
        role=role,
        output_dir=output_dir,
        cache_dir=cache_dir,
        parent_adapter=parent_adapter,
        dataset_snapshot_id=dataset_snapshot_id,
        progress=progress,
    )
