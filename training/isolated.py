"""Running a trainer in a process of its own (``sparring retrain`` does, for every job).

The retrain loop serves its games from a model loaded in its own process; training there as
well puts both in one address space for the rest of the run. In a child process instead:

- a trainer that dies (an exception, a segfault, the kernel's OOM killer) fails its job with
  the cause, and the loop goes on with the active adapters;
- Ctrl-C and SIGTERM stop the training at once (a signal sent to the parent alone terminates
  the child; the parent raises KeyboardInterrupt, or ``training.signals.Terminated``, whose
  cleanups mark the job), where an in-process trainer would only notice at its next step;
- the serving process never runs the training's compute or keeps its memory.

The child is spawned (a fresh interpreter: no threads or backend state inherited), gets the
job through a pipe, reports progress and log entries through it and sends back the ``TrainResult``.
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from training.signals import raised_in_block

if TYPE_CHECKING:  # the trainers' package imports TRL and torch: not for a command that only cleans up
    from training.trainers.result import TrainResult

POLL_S = 0.2


class TrainerDied(RuntimeError):
    """The trainer's process raised or exited without a result."""


def train_in_child(
    kind: str,
    rows: Sequence[Mapping[str, Any]] | Any,
    config: Any,
    *,
    progress: Callable[[int, int], None] | None = None,
    on_log: Callable[[dict[str, float]], None] | None = None,
    **kwargs: Any,
) -> TrainResult:
    """The train function of trainer kind ``kind`` (``training.trainers.kinds``), called in a
    spawned child process with the same arguments; returns its result, or raises TrainerDied
    with the child's error."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    child = context.Process(target=_child_main, args=(theirs,), name=f"sparring-train-{kind}", daemon=True)
    # Ctrl-C and SIGTERM raise here while the parent waits, even where an event loop owns them
    # (its handlers would act once the training is over); caught from before the child exists
    with raised_in_block(signal.SIGINT, signal.SIGTERM):
        try:
            child.start()
            theirs.close()
            ours.send((kind, rows, config, kwargs))
            return _wait(child, ours, progress, on_log)
        except BaseException:
            if child.is_alive():
                child.terminate()
            raise
        finally:
            if child.pid is not None:  # started
                child.join()
            ours.close()


def _wait(child: multiprocessing.process.BaseProcess, conn: Connection,
          progress: Callable[[int, int], None] | None,
          on_log: Callable[[dict[str, float]], None] | None) -> TrainResult:
    while True:
        if not conn.poll(POLL_S):
            if not child.is_alive() and not conn.poll():
                raise _died(child)
            continue
        try:
            message = conn.recv()
        except EOFError:
            raise _died(child) from None
        match message:
            case ("progress", step, total):
                if progress is not None:
                    progress(step, total)
            case ("log", entry):
                if on_log is not None:
                    on_log(entry)
            case ("done", result):
                return result
            case ("error", error, trace):
                raise TrainerDied(f"{error}\n(in the trainer process)\n{trace}")


def _died(child: multiprocessing.process.BaseProcess) -> TrainerDied:
    """The error for a trainer process that ended without sending a result."""
    child.join()
    code = child.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        reason = f"signal {name}" + (": killed, out of memory?" if name == "SIGKILL" else "")
    else:
        reason = f"exit code {code}"
    return TrainerDied(f"the trainer process exited without a result ({reason})")


def _child_main(conn: Connection) -> None:
    from training.trainers.kinds import trainer_kind

    try:
        kind, rows, config, kwargs = conn.recv()
        train = trainer_kind(kind).train
        result = train(rows, config, progress=lambda step, total: conn.send(("progress", step, total)),
                       on_log=lambda entry: conn.send(("log", entry)), **kwargs)
        conn.send(("done", result))
    except KeyboardInterrupt:
        sys.exit(130)
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=12)))
        sys.exit(1)
    finally:
        conn.close()
