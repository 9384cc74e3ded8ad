"""KTO (unpaired preferences) of one role's LoRA adapter with TRL's ``KTOTrainer``."""

from __future__ import annotations

from pathlib import Path

from storage.models import DatasetKind
from training.trainers.data import TrainingRows, as_dataset, require_columns
from training.trainers.kto_config import KTOTrainingConfig
from training.trainers.progress import ProgressFn
from training.trainers.result import TrainResult
from training.trainers.trl_runner import train_with_trl

KTO_COLUMNS = (("prompt", "completion", "label"),)
"""TRL's conversational unpaired-preference rows (the KTO builder's format)."""


def train_kto(
    rows: TrainingRows,
    config: KTOTrainingConfig | None = None,
    *,
    role: str,
    output_dir: Path,
    cache_dir: Path,
    parent_adapter: Path | None = None,
    dataset_snapshot_id: int | None = None,
    progress: ProgressFn | None = None,
) -> TrainResult:
    """Train ``role``'s adapter on labelled completions and write it to ``output_dir`` (which must not hold files).

    ``parent_adapter``: continue from this adapter folder (it is only read) instead of a
    fresh adapter. ``progress(step, total)`` is called after every optimiser step.
    """
    config = config or KTOTrainingConfig()
    dataset = as_dataset(rows, DatasetKind.KTO)
    require_columns(dataset, DatasetKind.KTO, *KTO_COLUMNS)
    from trl import KTOConfig, KTOTrainer

    return train_with_trl(
        kind=DatasetKind.KTO,
        trainer_cls=KTOTrainer,
        args_cls=KTOConfig,
        dataset=dataset,
        config=config,
        role=role,
        output_dir=output_dir,
        cache_dir=cache_dir,
        parent_adapter=parent_adapter,
        dataset_snapshot_id=dataset_snapshot_id,
        progress=progress,
    )
