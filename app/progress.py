"""Progress for people: a live bar on a terminal, plain periodic lines anywhere else.

On a console that is not a terminal (a file, a pipe, a CI log) rich's live display draws
nothing until it stops, so a long command shows its progress in one burst at the end. There
``progress()`` returns a ``LineProgress`` instead: the same columns, less the bar, printed as a
plain line when a task starts, every ``PERIOD_S`` seconds while it advances and when it ends.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

PERIOD_S = 10.0


def progress(*columns: str | ProgressColumn, console: Console, **kwargs: Any) -> Progress:
    """A rich ``Progress`` on a terminal, a ``LineProgress`` otherwise (same arguments)."""
    if console.is_terminal:
        return Progress(*columns, console=console, **kwargs)
    return LineProgress(*columns, console=console, **kwargs)


class LineProgress(Progress):
    """A ``Progress`` that prints plain lines instead of drawing a live display."""

    def __init__(self, *columns: str | ProgressColumn, console: Console, period_s: float = PERIOD_S,
                 **kwargs: Any) -> None:
        super().__init__(*columns, console=console, **{**kwargs, "disable": True})
        self.period_s = period_s
        self._shown: dict[TaskID, tuple[float, float]] = {}
        """per task: when its last line was printed and how much was completed then"""

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> TaskID:
        task_id = super().add_task(description, *args, **kwargs)
        self._report(task_id)
        return task_id

    def update(self, task_id: TaskID, **kwargs: Any) -> None:
        super().update(task_id, **kwargs)
        self._report(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._report(task_id)

    def stop(self) -> None:
        """Print the last state of every task whose last line is out of date."""
        for task_id in list(self._shown):
            self._report(task_id, final=True)
        super().stop()

    def _report(self, task_id: TaskID, final: bool = False) -> None:
        with self._lock:
            task = self._tasks[task_id]
            now = time.monotonic()
            last = self._shown.get(task_id)
            changed = last is None or task.completed != last[1]
            due = last is None or (changed and (final or task.finished or now - last[0] >= self.period_s))
            if not due:
                return
            self._shown[task_id] = (now, task.completed)
            line = self.line(task)
        self.console.print(line, highlight=False)

    def line(self, task: Task) -> Text:
        """The task's columns as one line of text, without the bar."""
        parts = []
        for column in self.columns:
            if isinstance(column, BarColumn):
                continue
            rendered = Text.from_markup(column.format(task=task)) if isinstance(column, str) else column(task)
            parts.append(rendered if isinstance(rendered, Text) else Text(str(rendered)))
        return Text(" ").join(parts)


def phase_columns() -> tuple[ProgressColumn, ...]:
    """The columns of a bar per phase: its name, the bar, done of total, time so far."""
    return TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()


class PhaseBars:
    """One progress bar per phase of long work (play, train a role, each evaluation), added
    when the phase first reports."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._bars: dict[str, Any] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        bar = self._bars.get(phase)
        if bar is None:
            bar = self._bars[phase] = self._progress.add_task(phase, total=total)
        self._progress.update(bar, completed=done, total=total)


class PhaseDisplay:
    """What a command shows of an API call that loads models, then reports phases
    (``app.api.EvaluationProgress``, ``app.api.RetrainProgress``): a spinner while the models
    load, then a bar per phase on ``progress``; the call's lines printed dim above them."""

    def __init__(self, console: Console, progress: Progress) -> None:
        self.loading_status = console.status("loading models…")
        self.progress = progress
        self.bars = PhaseBars(progress)
        self.started = False

    def __enter__(self) -> PhaseDisplay:
        return self

    def __exit__(self, *_: object) -> None:
        self.loading_status.stop()
        if self.started:  # a display never started is not drawn (a refused command prints its error only)
            self.progress.stop()

    def loading(self) -> None:
        self.loading_status.start()

    def loaded(self) -> None:
        self.loading_status.stop()
        self.progress.start()
        self.started = True

    def say(self, message: str) -> None:
        self.progress.console.print(f"[dim]{message}[/]")

    def phase(self, name: str, done: int, total: int | None) -> None:
        self.bars(name, done, total)
