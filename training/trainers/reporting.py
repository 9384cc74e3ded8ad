"""Experiment trackers (``report_to``): transformers' own reporting callbacks, for every trainer.

TRL's trainers build them from ``report_to`` themselves; the offline PPO loop, which has no
Trainer, drives the same callbacks with ``TrackerReport`` (train begin, one ``on_log`` per
log entry, train end), so a run shows up in TensorBoard, W&B, MLflow... whichever trainer
made it. TensorBoard would write inside the trainer's output folder, which a training job
deletes once the adapter is published: with ``logging_dir`` set, its event files go to
``logging_dir/<kind>-<role>-<time>`` instead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from training.trainers.errors import TrainerError

TENSORBOARD = "tensorboard"


def targets(report_to: str | Sequence[str]) -> list[str]:
    """The trackers ``report_to`` names: "none" is none, "all" every installed one."""
    from transformers.integrations import get_available_reporting_integrations

    names = [report_to] if isinstance(report_to, str) else list(report_to)
    if names == ["all"]:
        return list(get_available_reporting_integrations())
    return [name for name in names if name != "none"]


def run_folder(logging_dir: str, kind: str, role: str) -> Path:
    """Where one run's TensorBoard event files go."""
    return Path(logging_dir).expanduser() / f"{kind}-{role}-{time.strftime('%Y%m%d-%H%M%S')}"


def tracker_callbacks(names: Sequence[str], tensorboard_dir: Path | None) -> list[TrainerCallback]:
    """transformers' callback of each tracker; TensorBoard's writes to ``tensorboard_dir`` when given.
    A tracker whose package is missing raises TrainerError saying what to install."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    callbacks: list[TrainerCallback] = []
    for name in names:
        try:
            if name == TENSORBOARD and tensorboard_dir is not None:
                callbacks.append(INTEGRATION_TO_CALLBACK[name](tb_writer=_summary_writer(tensorboard_dir)))
            else:
                callbacks.append(INTEGRATION_TO_CALLBACK[name]())
        except (RuntimeError, ImportError) as exc:
            raise TrainerError(f"report_to {name!r}: {exc}. Install it, or drop {name!r} from report_to.") from exc
    return callbacks


def _summary_writer(folder: Path) -> Any:
    """A TensorBoard writer, from torch (needs the tensorboard package) or tensorboardX, as transformers picks."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        try:
            from tensorboardX import SummaryWriter
        except ImportError as exc:
            raise RuntimeError("TensorBoard needs the package tensorboard or tensorboardX") from exc
    return SummaryWriter(log_dir=str(folder))


class TrackerReport:
    """Sends a loop's log entries to trackers through their transformers callbacks."""

    def __init__(self, callbacks: list[TrainerCallback], args: TrainingArguments, max_steps: int) -> None:
        self._callbacks = callbacks
        self._args = args
        self._state = TrainerState(max_steps=max_steps, logging_steps=args.logging_steps)
        self._control = TrainerControl()

    def begin(self, model: Any) -> None:
        for callback in self._callbacks:
            callback.on_train_begin(self._args, self._state, self._control, model=model)

    def log(self, entry: Mapping[str, float]) -> None:
        """One log entry (with its ``step`` and ``epoch``), as a Trainer's ``log`` passes it on."""
        self._state.global_step = int(entry.get("step", self._state.global_step))
        self._state.epoch = entry.get("epoch", self._state.epoch)
        logs = {key: value for key, value in entry.items() if key != "step"}
        for callback in self._callbacks:
            callback.on_log(self._args, self._state, self._control, logs=logs)

    def end(self, model: Any) -> None:
        for callback in self._callbacks:
            callback.on_train_end(self._args, self._state, self._control, model=model)
