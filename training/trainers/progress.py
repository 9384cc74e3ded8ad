"""Progress reporting, log entries and time budgets: trainers call a caller-supplied function
after every optimiser step, another with every entry they add to their log history, and stop
once a time budget is spent.

The progress function receives ``(completed_steps, total_steps)``; it is called once with 0
before the first step. The CLI draws a rich progress bar with it. The log function receives
each log entry as the trainer's ``log_history`` holds it (numbers only, with its ``step``):
the training job keeps them as the job's history while it trains.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

ProgressFn = Callable[[int, int], None]
LogFn = Callable[[dict[str, float]], None]


class ProgressCallback(TrainerCallback):
    """A transformers ``TrainerCallback`` that forwards step / total to a ``ProgressFn``."""

    def __init__(self, report: ProgressFn) -> None:
        self._report = report

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._report(0, state.max_steps)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        self._report(state.global_step, state.max_steps)


class LogCallback(TrainerCallback):
    """A transformers ``TrainerCallback`` that forwards every log entry (loss, learning rate,
    reward margins...) with its step to a ``LogFn``, as it is added to ``log_history``."""

    def __init__(self, log: LogFn) -> None:
        self._log = log

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._log(numeric({**(logs or {}), "step": state.global_step}))


def numeric(entry: dict[str, Any]) -> dict[str, float]:
    """The numbers of a log entry, as floats (TRL's entries hold nothing else worth keeping)."""
    return {key: float(value) for key, value in entry.items() if isinstance(value, int | float)}


class TimeBudgetCallback(TrainerCallback):
    """Stops training after the optimiser step that uses up ``seconds`` (the run still saves)."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._started = 0.0

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self._started = time.monotonic()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        if time.monotonic() - self._started >= self._seconds:
            control.should_training_stop = True
