"""Progress reporting and time budgets: trainers call a caller-supplied function after every
optimiser step, and stop once a time budget is spent.

The function receives ``(completed_steps, total_steps)``; it is called once with 0 before
the first step. The CLI draws a rich progress bar with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

ProgressFn = Callable[[int, int], None]


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
