"""The run shared by the TRL trainers (SFT, DPO, KTO, GRPO), configured through TRL's public API only.

``TRLDatasetTrainer`` is the train function of SFT, DPO and KTO: one TRL trainer on the rows
of a dataset snapshot (``training.trainers.kinds`` holds one per kind); GRPO calls
``train_with_trl`` with its rollout function.

1. check the output folder and the parent adapter (before the model is loaded);
2. load the base model; start a fresh adapter (TRL's ``peft_config``) or pass a trainable
   copy of the parent adapter (a ``PeftModel``; DPO and KTO then use a frozen copy of it,
   their "ref" adapter, as the reference policy);
3. build TRL's trainer with our ``ProgressCallback``, train, collect metrics from
   ``log_history``;
4. write the ``default`` adapter and ``sparring.json`` to a staging folder, rename it into place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback, TrainingArguments, set_seed

from storage.models import DatasetKind
from training.adapter_folders import AdapterMetadata, discard, prepare_run, staging_dir, write_adapter
from training.trainers.base_config import TRLTrainingConfig
from training.trainers.data import TrainingRows, as_dataset, longest_row_tokens, require_columns
from training.trainers.errors import TrainingDivergedError
from training.trainers.lora import attach_adapter, load_base_model, require_frozen_base, uses_cpu
from training.trainers.progress import LogCallback, LogFn, ProgressCallback, ProgressFn, TimeBudgetCallback, numeric
from training.trainers.reporting import TENSORBOARD, run_folder, targets, tracker_callbacks
from training.trainers.result import TrainResult


@dataclass(frozen=True)
class TRLDatasetTrainer:
    """One of TRL's trainers on a dataset snapshot's rows; calling it trains."""

    kind: DatasetKind
    trainer: str
    """TRL's trainer class, by name (``trl`` is imported when training starts)"""
    config_type: type[TRLTrainingConfig]
    columns: tuple[tuple[str, ...], ...]
    """the row formats it reads, any one of them (TRL's, as the kind's builder writes them)"""

    def __call__(
        self,
        rows: TrainingRows,
        config: TRLTrainingConfig | None = None,
        *,
        role: str,
        output_dir: Path,
        cache_dir: Path,
        parent_adapter: Path | None = None,
        dataset_snapshot_id: int | None = None,
        progress: ProgressFn | None = None,
        on_log: LogFn | None = None,
    ) -> TrainResult:
        """Train ``role``'s adapter on ``rows`` and write it to ``output_dir`` (which must not hold files).

        ``parent_adapter``: continue from this adapter folder (it is only read) instead of a
        fresh adapter. ``progress(step, total)`` is called after every optimiser step,
        ``on_log(entry)`` with every log entry.
        """
        config = config or self.config_type()
        dataset = as_dataset(rows, self.kind)
        require_columns(dataset, self.kind, *self.columns)
        import trl

        return train_with_trl(
            kind=self.kind,
            trainer_cls=getattr(trl, self.trainer),
            args_cls=self.config_type.trl_config_class(),
            dataset=dataset,
            config=config,
            role=role,
            output_dir=output_dir,
            cache_dir=cache_dir,
            parent_adapter=parent_adapter,
            dataset_snapshot_id=dataset_snapshot_id,
            progress=progress,
            on_log=on_log,
        )


def train_with_trl(
    *,
    kind: str,
    trainer_cls: type,
    args_cls: type[TrainingArguments],
    dataset: Dataset,
    config: TRLTrainingConfig,
    role: str,
    output_dir: Path,
    cache_dir: Path,
    parent_adapter: Path | None,
    dataset_snapshot_id: int | None,
    progress: ProgressFn | None,
    on_log: LogFn | None = None,
) -> TrainResult:
    """Train one adapter with ``trainer_cls`` (a TRL trainer) configured by ``args_cls`` (its config class)."""
    output_dir = prepare_run(
        role=role, output_dir=output_dir, parent_adapter=parent_adapter, model=config.model, cache_dir=cache_dir
    )
    set_seed(config.seed)
    model, tokenizer = load_base_model(config.model, cache_dir=cache_dir, device=config.device,
                                       precision=config.precision)
    peft_config = None
    if parent_adapter is None:
        peft_config = config.lora.to_peft()
    else:
        model = attach_adapter(model, config.lora, parent_adapter)
    callbacks: list[TrainerCallback] = [ProgressCallback(progress)] if progress is not None else []
    if on_log is not None:
        callbacks.append(LogCallback(on_log))
    if config.logging_dir is not None and TENSORBOARD in targets(config.report_to):
        callbacks += tracker_callbacks([TENSORBOARD], run_folder(config.logging_dir, kind, role))
    if config.max_seconds is not None:
        callbacks.append(TimeBudgetCallback(config.max_seconds))
    if config.may_split:  # reading every row's tokens is needed for nothing else
        config = config.split_for(longest_row_tokens(dataset, tokenizer))
    staging = staging_dir(output_dir)
    try:
        args = args_cls(
            **config.trl_arguments(
                output_dir=str(staging), bf16=model.dtype == torch.bfloat16, use_cpu=uses_cpu(config.device)
            )
        )
        trainer = trainer_cls(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=callbacks,
        )
        trainer.remove_callback(PrinterCallback)  # it prints every log entry; progress goes to the callback
        require_frozen_base(trainer.model)
        output = trainer.train()
        log_history = [numeric(entry) for entry in trainer.state.log_history]
        metrics = final_metrics(log_history, output.training_loss, output.global_step, output.metrics)
        metrics["processes"] = float(args.world_size)  # data-parallel processes that trained it
        if not math.isfinite(metrics["train_loss"]):
            raise TrainingDivergedError(
                f"The {kind} loss became {metrics['train_loss']} (diverged); no adapter was written. Lower "
                f"learning_rate (now {config.learning_rate}) or max_grad_norm and train again."
            )
        metadata = AdapterMetadata.new(
            role=role,
            trainer=kind,
            config=config,
            metrics=metrics,
            parent_adapter=parent_adapter,
            dataset_snapshot_id=dataset_snapshot_id,
        )
        write_adapter(trainer.model, staging, output_dir, metadata)
    except BaseException:
        discard(staging)
        raise
    return TrainResult(adapter_dir=output_dir, metrics=metrics, log_history=log_history)


def final_metrics(
    log_history: list[dict[str, float]], train_loss: float, steps: int, summary: dict[str, Any]
) -> dict[str, float]:
    """The last logged training entry, plus the run's mean loss, step count and runtime."""
    last = next((entry for entry in reversed(log_history) if "loss" in entry), {"loss": train_loss})
    metrics = {key: value for key, value in last.items() if key != "step"}
    metrics.update(train_loss=float(train_loss), steps=float(steps), runtime_s=float(summary["train_runtime"]))
    return metrics
