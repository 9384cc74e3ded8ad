"""Train a verifier: TRL's ``RewardTrainer`` on the reward builder's rows, with a LoRA adapter
(PEFT, task ``SEQ_CLS``) on a base model given a one-score head.

1. before any model is loaded: read the rows as pairs of a correct and an incorrect answer
   (``reward_pairs``): ``paired`` rows are pairs already (two answers to one state);
   ``labelled`` rows are paired within each difficulty level, in row order, so both answers
   of every pair are equally hard and difficulty cannot tell them apart. Rows with only one
   class, overall or in every level, are refused with what to do;
2. check the output folder and the parent (a reward model of this base and role);
3. load the base with a fresh head (from the config's seed); start a fresh adapter (TRL's
   ``peft_config``; PEFT's ``SEQ_CLS`` task keeps the head, ``score``, trainable in the
   adapter's ``modules_to_save``) or a trainable copy of the parent;
4. train; only the LoRA matrices and the head's adapter copy may be trainable;
5. measure the threshold: the median score of the training answers under the trained model
   (the rows are balanced, so half of them lie above it), and the share of them on their
   label's side of it (``threshold_accuracy``);
6. write the adapter (LoRA and head) and ``sparring.json`` to a staging folder, rename it.

Its metrics add to TRL's (loss, ``accuracy``: chosen scored above rejected, ``margin``...):
``pairs``, ``unpaired`` (labelled answers left without a partner of the other class at their
level), ``threshold`` and ``threshold_accuracy``. The registry keeps them on the version;
a judge seat filled with it reads ``threshold`` from there.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import PrinterCallback, TrainerCallback, set_seed

from graphs.policies.adapter_folder import CONFIG_FILE
from graphs.policies.base import Message
from graphs.policies.reward_model import conversation, load_reward_base, score_conversations
from storage.models import DatasetKind
from training.adapter_folders import AdapterMetadata, discard, prepare_run, read_metadata, staging_dir, write_adapter
from training.trainers.data import TrainingRows, as_dataset, require_columns
from training.trainers.errors import AdapterMismatchError, DatasetColumnsError, TrainingDivergedError
from training.trainers.lora import LORA_PARAMETER_MARK, uses_cpu
from training.trainers.progress import LogCallback, LogFn, ProgressCallback, ProgressFn, TimeBudgetCallback, numeric
from training.trainers.reporting import TENSORBOARD, run_folder, targets, tracker_callbacks
from training.trainers.result import TrainResult
from training.trainers.reward_config import RewardTrainingConfig
from training.trainers.trl_runner import final_metrics

KIND = DatasetKind.REWARD
LABELLED = ("prompt", "completion", "label")
PAIRED = ("prompt", "chosen", "rejected")
HEAD_PARAMETER_MARK = "modules_to_save"
"""The adapter's trainable copy of the score head (PEFT names it ``score.modules_to_save.default``)."""
SEQ_CLS = "SEQ_CLS"


@dataclass(frozen=True)
class RewardPairs:
    """The rows as TRL's preference pairs, and the answers they hold."""

    dataset: Dataset
    """``{"chosen", "rejected"}`` conversations (each its prompt and answer), or ``paired`` rows as they are"""
    answers: list[tuple[list[Message], bool]]
    """every answer of the pairs as the conversation scored, and whether it is correct"""
    unpaired: int
    """labelled answers left out: no answer of the other class at their difficulty to pair with"""


def reward_pairs(rows: TrainingRows) -> RewardPairs:
    """Pair the rows (see the module docstring); DatasetColumnsError when they hold no pair."""
    dataset = as_dataset(rows, KIND)
    require_columns(dataset, KIND, LABELLED, PAIRED)
    if set(PAIRED) <= set(dataset.column_names):
        pairs = dataset.select_columns(list(PAIRED))
        answers = [(conversation(row["prompt"], _answer(row[side])), side == "chosen")
                   for row in pairs for side in ("chosen", "rejected")]
        return RewardPairs(pairs, answers, unpaired=0)
    levels: dict[str | None, tuple[list[list[Message]], list[list[Message]]]] = {}
    for row in dataset:
        label = row["label"]
        if label not in (True, False, 0, 1):
            raise DatasetColumnsError(f"a reward row's label must be true (a correct answer) or false, got {label!r}")
        level = levels.setdefault(row.get("difficulty"), ([], []))
        level[0 if label else 1].append(conversation(row["prompt"], _answer(row["completion"])))
    _require_both_classes(levels)
    chosen, rejected, answers = [], [], []
    for right, wrong in levels.values():
        for good, bad in zip(right, wrong, strict=False):
            chosen.append(good)
            rejected.append(bad)
            answers += [(good, True), (bad, False)]
    unpaired = len(dataset) - 2 * len(chosen)
    return RewardPairs(Dataset.from_dict({"chosen": chosen, "rejected": rejected}), answers, unpaired)


def _answer(completion: Any) -> str:
    """The answer text of a completion column (one assistant message, TRL's conversational format)."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def _require_both_classes(levels: Mapping[str | None, tuple[list[Any], list[Any]]]) -> None:
    correct = sum(len(right) for right, _ in levels.values())
    incorrect = sum(len(wrong) for _, wrong in levels.values())
    fix = ("Play tasks that the answering role gets sometimes right and sometimes wrong (a wider range of "
           "difficulties, or sampling at a higher temperature), then build the reward snapshot again")
    if not correct or not incorrect:
        which = "correct" if correct else "incorrect"
        raise DatasetColumnsError(
            f"all {correct + incorrect} reward rows are {which} answers: a verifier learns to tell correct from "
            f"incorrect answers, so it needs both. {fix}."
        )
    if not any(right and wrong for right, wrong in levels.values()):
        counts = ", ".join(f"{level or 'no difficulty'}: {len(right)} correct, {len(wrong)} incorrect"
                           for level, (right, wrong) in levels.items())
        raise DatasetColumnsError(
            f"no difficulty level has both a correct and an incorrect answer ({counts}). Answers are paired "
            f"within a level so that the verifier cannot learn difficulty instead of truth. {fix}."
        )


def train_reward(
    rows: TrainingRows,
    config: RewardTrainingConfig | None = None,
    *,
    role: str,
    output_dir: Path,
    cache_dir: Path,
    parent_adapter: Path | None = None,
    dataset_snapshot_id: int | None = None,
    progress: ProgressFn | None = None,
    on_log: LogFn | None = None,
) -> TrainResult:
    """Train ``role``'s verifier on reward rows and write it to ``output_dir`` (which must not hold files).

    ``parent_adapter``: continue from this verifier's folder (it is only read). ``progress(step,
    total)`` is called after every optimiser step, ``on_log(entry)`` with every log entry.
    """
    from trl import RewardConfig, RewardTrainer

    config = config or RewardTrainingConfig()
    pairs = reward_pairs(rows)
    output_dir = prepare_run(
        role=role, output_dir=output_dir, parent_adapter=parent_adapter, model=config.model, cache_dir=cache_dir
    )
    if parent_adapter is not None:
        _check_parent_is_a_verifier(Path(parent_adapter))
    set_seed(config.seed)
    model, tokenizer = load_reward_base(config.model, cache_dir=cache_dir, device=config.device,
                                        dtype=config.precision)
    peft_config = None
    if parent_adapter is None:
        peft_config = replace(config.lora.to_peft(), task_type=SEQ_CLS)
    else:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(parent_adapter), is_trainable=True)
    callbacks: list[TrainerCallback] = [ProgressCallback(progress)] if progress is not None else []
    if on_log is not None:
        callbacks.append(LogCallback(on_log))
    if config.logging_dir is not None and TENSORBOARD in targets(config.report_to):
        callbacks += tracker_callbacks([TENSORBOARD], run_folder(config.logging_dir, KIND, role))
    if config.max_seconds is not None:
        callbacks.append(TimeBudgetCallback(config.max_seconds))
    staging = staging_dir(output_dir)
    try:
        args = RewardConfig(**config.trl_arguments(
            output_dir=str(staging), bf16=model.dtype == torch.bfloat16, use_cpu=uses_cpu(config.device)
        ))
        trainer = RewardTrainer(model=model, args=args, train_dataset=pairs.dataset, processing_class=tokenizer,
                                peft_config=peft_config, callbacks=callbacks)
        trainer.remove_callback(PrinterCallback)  # it prints every log entry; progress goes to the callback
        require_adapter_and_head_only(trainer.model)
        output = trainer.train()
        log_history = [numeric(entry) for entry in trainer.state.log_history]
        metrics = final_metrics(log_history, output.training_loss, output.global_step, output.metrics)
        if not math.isfinite(metrics["train_loss"]):
            raise TrainingDivergedError(
                f"The reward loss became {metrics['train_loss']} (diverged); no verifier was written. Lower "
                f"learning_rate (now {config.learning_rate}) or max_grad_norm and train again."
            )
        metrics.update(pairs=float(len(pairs.dataset)), unpaired=float(pairs.unpaired),
                       **_threshold(trainer.model.eval(), tokenizer, pairs.answers))
        metadata = AdapterMetadata.new(
            role=role, trainer=KIND, config=config, metrics=metrics, parent_adapter=parent_adapter,
            dataset_snapshot_id=dataset_snapshot_id,
        )
        write_adapter(trainer.model, staging, output_dir, metadata)
    except BaseException:
        discard(staging)
        raise
    return TrainResult(adapter_dir=output_dir, metrics=metrics, log_history=log_history)


def _check_parent_is_a_verifier(parent: Path) -> None:
    metadata = read_metadata(parent)
    task = json.loads((parent / CONFIG_FILE).read_text()).get("task_type")
    if metadata is not None and metadata.trainer != KIND:
        what = f"trained by {metadata.trainer}"
    elif task != SEQ_CLS:
        what = f"its {CONFIG_FILE} has task_type {task!r}, not {SEQ_CLS!r}"
    else:
        return
    raise AdapterMismatchError(
        f"The parent adapter in {parent} is not a verifier ({what}): a verifier continues only a verifier, a "
        f"reward model trained by `sparring train reward`. Train a fresh verifier (no parent adapter)."
    )


def require_adapter_and_head_only(model: torch.nn.Module) -> None:
    """Raise unless every trainable parameter is a LoRA matrix or the adapter's copy of the head."""
    stray = [name for name, p in model.named_parameters()
             if p.requires_grad and LORA_PARAMETER_MARK not in name and HEAD_PARAMETER_MARK not in name]
    if stray:
        raise RuntimeError(
            f"Parameters outside the verifier's adapter are trainable ({', '.join(stray[:3])}...): training "
            f"would change the base model that every role shares. Freeze them before training."
        )


def _threshold(model: torch.nn.Module, tokenizer: Any, answers: list[tuple[list[Message], bool]]) -> dict[str, float]:
    scores = score_conversations(model, tokenizer, [messages for messages, _ in answers])
    threshold = statistics.median(scores)
    right = sum((score > threshold) == correct for score, (_, correct) in zip(scores, answers, strict=True))
    return {"threshold": float(threshold), "threshold_accuracy": right / len(answers)}
