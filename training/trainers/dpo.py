"""Direct preference optimisation (optionally RPO) of one role's LoRA adapter with TRL's ``DPOTrainer``."""

from __future__ import annotations

from pathlib import Path

from storage.models import DatasetKind
from training.trainers.data import TrainingRows, as_dataset, require_columns
from training.trainers.dpo_config import DPOTrainingConfig
from training.trainers.progress import ProgressFn
from training.trainers.result import TrainResult
from training.trainers.trl_runner import train_with_trl

DPO_COLUMNS = (("prompt", "chosen", "rejected"),)
"""TRL's conversational preference rows (the DPO builder's format)."""


def train_dpo(
    rows: TrainingRows,
    config: DPOTrainingConfig | None = None,
    *,
    role: str,
    output_dir: Path,
    cache_dir: Path,
    parent_adapter: Path | None = None,
    dataset_snapshot_id: int | None = None,
    progress: ProgressFn | None = None,
) -> TrainResult:
    """Train ``role``'s adapter on preference pairs and write it to ``output_dir`` (which must not hold files).

    ``parent_adapter``: continue from this adapter folder (it is only read) instead of a
    fresh adapter. ``progress(step, total)`` is called after every optimiser step.
    """
    config = config or DPOTrainingConfig()
    dataset = as_dataset(rows, DatasetKind.DPO)
    require_columns(dataset, DatasetKind.DPO, *DPO_COLUMNS)
    from trl import DPOConfig, DPOTrainer

    return train_with_trl(
        kind=DatasetKind.DPO,
        trainer_cls=DPOTrainer,
        args_cls=DPOConfig,
        dataset=dataset,
        config=config,
        role=role,
        output_dir=output_dir,
        cache_dir=cache_dir,
        parent_adapter=parent_adapter,
        dataset_snapshot_id=dataset_snapshot_id,
        progress=progress,
    )
