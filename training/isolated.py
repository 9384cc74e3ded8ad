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
Several children train one job data-parallel, one per GPU (``SPARRING_TRAIN_PROCESSES``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
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
    processes: int = 1,
    progress: Callable[[int, int], None] | None = None,
    on_log: Callable[[dict[str, float]], None] | None = None,
    **kwargs: Any,
) -> TrainResult:
    """The train function of trainer kind ``kind`` (``training.trainers.kinds``), called in a
    spawned child process with the same arguments; returns its result, or raises TrainerDied
    with the child's error.

    ``processes`` above 1: that many children train data-parallel (torch.distributed through
    TRL's Trainer: one GPU each under CUDA, else gloo, the CPU cores shared among them). Each
    gets ``config`` as it is (``TrainingConfig.split_across`` makes one with the same effective
    batch); rank 0 writes the adapter and reports progress, the others write to a temporary
    folder. One child that fails stops them all."""
    context = multiprocessing.get_context("spawn")
    port = _free_port() if processes > 1 else 0
    ranks: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
    # Ctrl-C and SIGTERM raise here while the parent waits, even where an event loop owns them
    # (its handlers would act once the training is over); caught from before the children exist
    with raised_in_block(signal.SIGINT, signal.SIGTERM):
        try:
            for rank in range(processes):
                ours, theirs = context.Pipe()
                name = f"sparring-train-{kind}" + (f"-rank{rank}" if processes > 1 else "")
                child = context.Process(target=_child_main, args=(theirs, rank, processes, port), name=name,
                                        daemon=True)
                ranks.append((child, ours))
                child.start()
                theirs.close()
                ours.send((kind, rows, config, kwargs))
            return _wait(ranks, progress, on_log)
        except BaseException:
            for child, _ in ranks:
                if child.is_alive():
                    child.terminate()
            raise
        finally:
            for child, conn in ranks:
                if child.pid is not None:  # started
                    child.join()
                conn.close()


def _free_port() -> int:
    """A TCP port of this host that nothing listens on now (rank 0's rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait(ranks: Sequence[tuple[multiprocessing.process.BaseProcess, Connection]],
          progress: Callable[[int, int], None] | None,
          on_log: Callable[[dict[str, float]], None] | None) -> TrainResult:
    """Rank 0's result once every rank has sent its own."""
    results: dict[int, TrainResult] = {}
    while len(results) < len(ranks):
        waiting = [(rank, child, conn) for rank, (child, conn) in enumerate(ranks) if rank not in results]
        if not wait([conn for _, _, conn in waiting], POLL_S):
            for _, child, conn in waiting:
                if not child.is_alive() and not conn.poll():
                    raise _died(child)
            continue
        for rank, child, conn in waiting:
            if not conn.poll():
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
                    results[rank] = result
                case ("error", error, trace):
                    where = f"the trainer process of rank {rank}" if len(ranks) > 1 else "the trainer process"
                    raise TrainerDied(f"{error}\n(in {where})\n{trace}")
    return results[0]


def _died(child: multiprocessing.process.BaseProcess) -> TrainerDied:
    """The error for a trainer process that ended without sending a result."""
    child.join()
    code = child.exitcode
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        reason = f"signal {name}" + (": killed, out of memory?" if name == "SIGKILL" else "")
    else:
        reason = f"exit code {code}"
    return TrainerDied(f"the trainer process {child.name} exited without a result ({reason})")


def _child_main(conn: Connection, rank: int, world: int, port: int) -> None:
    if world > 1:  # before torch is imported: accelerate reads these when TRL's Trainer starts
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from training.trainers.kinds import trainer_kind

    try:
        kind, rows, config, kwargs = conn.recv()
        if world > 1:
            _take_share(config.device, rank, world)
        train = trainer_kind(kind).train
        if rank == 0:
            result = train(rows, config, progress=lambda step, total: conn.send(("progress", step, total)),
                           on_log=lambda entry: conn.send(("log", entry)), **kwargs)
        else:
            result = train_beside(train, rank, rows, config, **kwargs)
        conn.send(("done", result))
    except KeyboardInterrupt:
        sys.exit(130)
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc(limit=12)))
        sys.exit(1)
    finally:
        conn.close()


def train_beside(train: Callable[..., TrainResult], rank: int, rows: Any, config: Any, **kwargs: Any) -> TrainResult:
    """``train`` as data-parallel rank ``rank`` > 0: beside rank 0, which alone writes the adapter
    (and records the job); what this rank writes goes with its temporary folder."""
    with tempfile.TemporaryDirectory(prefix=f"sparring-rank{rank}-") as work:
        return train(rows, config, **{**kwargs, "output_dir": Path(work) / "adapter"})


def _take_share(device: str, rank: int, world: int) -> None:
    """Rank ``rank``'s GPU (``cuda`` then means it), or its share of this process's CPU cores."""
    import torch

    from training.trainers.lora import uses_cpu

    if not uses_cpu(device):
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
