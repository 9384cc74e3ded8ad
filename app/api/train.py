"""Train a LoRA adapter for one role, from a dataset snapshot of the logs or online (GRPO) from
episodes it plays, and publish it as a candidate version."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.api.datasets import OWN_ROW_FLAGS, BuildProgress, build_rows, row_options
from app.api.errors import InputError, RunError
from app.api.store import open_for_work, open_store, settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.settings import Settings
    from evaluation.screen import Screened
    from graphs.contract import GameSpec
    from graphs.tasks.base import Task
    from training.datasets import BuilderOptions
    from training.jobs import JobResult
    from training.registry import AdapterRecord
    from training.trainers.base_config import TrainingConfig
    from training.trainers.kinds import TrainerKind


class TrainProgress(BuildProgress, Protocol):
    """What a training call tells as it goes (the CLI shows spinners, then a bar of the steps)."""

    def warn(self, text: str) -> None:
        """Something the user should read: stale work marked failed."""

    def screening(self, tasks: int) -> None:
        """GRPO's screen plays ``tasks`` tasks greedily."""

    def screened(self, screen: Screened) -> None:
        """The screen ended; ``screen`` holds the tasks kept (not called when it fails)."""

    def training(self, kind: str, role: str) -> None:
        """The training job starts."""

    def step(self, done: int, total: int) -> None:
        """Optimiser steps done of ``total``."""


class _Silent:
    def building(self, kind: str, role: str, game: str) -> None:
        pass

    def built(self) -> None:
        pass

    def warn(self, text: str) -> None:
        pass

    def screening(self, tasks: int) -> None:
        pass

    def screened(self, screen: Screened) -> None:
        pass

    def training(self, kind: str, role: str) -> None:
        pass

    def step(self, done: int, total: int) -> None:
        pass


@dataclass(frozen=True)
class TrainResult:
    """A finished training job and the candidate version it published."""

    kind: str
    role: str
    job_id: int
    adapter: AdapterRecord
    """the published version (``adapter.name``: ``role@vN``), a candidate; a verifier for ``reward``"""
    dataset: int | None
    """the snapshot it trained on (None: online GRPO)"""
    rows: int
    """the rows trained on, or the tasks GRPO played"""
    parent: str | None
    """the version training continued from (None: a fresh adapter)"""
    metrics: dict[str, float]
    """the trainer's final figures (loss, train_loss, steps, runtime_s...), as `sparring jobs show` lists them"""
    screen: Screened | None = None
    """GRPO's screen (``screen``): the tasks played, those kept, its run"""


@dataclass(frozen=True)
class _Online:
    """What online GRPO trains with: the tasks it plays, the trainer's further arguments (the
    other seats' policies, the recorder and run of its rollouts), and what closes them."""

    tasks: list[Task]
    extra: dict[str, Any]
    screen: Screened | None
    close: Callable[[], None] = field(repr=False)


def train(
    kind: str,
    *,
    role: str,
    answers: str | None = None,
    dataset: int | None = None,
    verdicts: str | None = None,
    max_rows: int | None = None,
    refinements: bool = False,
    first_repairs: bool = False,
    answer_lines: bool = False,
    pairs: str | None = None,
    baseline: str | None = None,
    game: str = "math-reflection",
    tasks: str | None = None,
    seats: Mapping[str, str] | Sequence[str] | None = None,
    screen: int | None = None,
    learning_rate: float | None = None,
    epochs: float | None = None,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    batch_size: int | None = None,
    beta: float | None = None,
    rpo_alpha: float | None = None,
    report_to: str | Sequence[str] | None = None,
    fresh: bool = False,
    parent: str | None = None,
    config_file: str | Path | None = None,
    database_url: str | None = None,
    progress: TrainProgress | None = None,
) -> TrainResult | None:
    """What `sparring train` does: train a LoRA adapter for ``role`` with the ``kind`` trainer
    (sft, dpo, kto, ppo from logs; grpo online; reward: a verifier of the ``answers`` role's
    answers, published under ``role``) and publish it as a candidate version, continuing from
    the role's active version unless ``fresh``, or from version ``parent`` (``role@vN``, a
    candidate too) when given.

    Dataset trainers read snapshot ``dataset``, else one built now from new logs (``verdicts``,
    ``max_rows``, ``refinements``, ``first_repairs``, ``answer_lines``, ``pairs``, ``baseline`` choose
    its rows as for `build_dataset`). GRPO plays ``tasks`` (train split) against ``seats``, only
    those the starting policy gets wrong among the first ``screen`` with one. The trainer's
    config: its defaults, the settings, ``config_file`` (YAML), then the figures given here.

    Bad input: InputError before a job is recorded. A trainer that fails: RunError, the job
    marked failed. Ctrl-C or SIGTERM: KeyboardInterrupt once the job is marked failed. Under
    `accelerate launch`, the processes of rank > 0 train beside rank 0, which alone records
    the job, and return None.
    """
    from training.trainers.kinds import trainer_kind

    progress = progress or _Silent()
    try:
        trainer = trainer_kind(kind)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    rows_role = _rows_role(trainer, role, answers)
    _check_row_options(kind, dataset, screen, own_rows=(verdicts is not None or max_rows is not None or refinements
                                                        or first_repairs or answer_lines), pairs=pairs,
                       baseline=baseline)
    build_options = row_options(kind, game, rows_role, verdicts, max_rows, refinements, first_repairs, answer_lines,
                                pairs, baseline)
    rank = _check_launch(trainer, rows_role, dataset)
    chosen = settings(database_url=database_url)
    flags = {
        "learning_rate": learning_rate, "num_train_epochs": epochs, "max_steps": max_steps,
        "max_seconds": max_seconds, "per_device_train_batch_size": batch_size, "beta": beta, "rpo_alpha": rpo_alpha,
        "report_to": tuple(report_to.split(",") if isinstance(report_to, str) else report_to) if report_to else None,
    }
    config = _trainer_config(kind, trainer.config_type, chosen, flags, Path(config_file) if config_file else None)
    _check_processes(kind, chosen.train_processes, config)
    # rank 0 alone writes to the store (it records the job); the processes beside it only read it
    engine = open_for_work(chosen.database_url, progress.warn) if rank == 0 else open_store(chosen.database_url)
    start = _start(engine, role, fresh=fresh, parent=parent)
    online = None
    if trainer.reads_snapshot:
        rows, snapshot_id = _logged_rows(engine, chosen, kind, rows_role, game, dataset, build_options, progress)
    else:
        starts_from = "model:base" if fresh else f"model:{parent}" if parent else "model"
        online = _online(engine, chosen, game, role, tasks, seats, screen=screen, start=starts_from, config=config,
                         progress=progress)
        rows, snapshot_id = online.tasks, None
    try:
        if rank != 0:
            _train_beside(trainer, rank, rows, config, chosen, role, start, snapshot_id)
            return None
        job = _run_job(engine, chosen, kind, role, rows, config, start, snapshot_id,
                       online.extra if online else {}, progress)
    finally:
        if online is not None:
            online.close()
    return TrainResult(kind, role, job.job_id, job.adapter, snapshot_id, len(rows), start.name if start else None,
                       job.metrics, online.screen if online else None)


def _start(engine: Engine, role: str, *, fresh: bool, parent: str | None) -> AdapterRecord | None:
    """The version training continues from: none when ``fresh``, ``parent`` when given, else the
    role's active version (none before one is promoted)."""
    from training.registry import RegistryError, active_version, get_version

    if fresh and parent is not None:
        raise InputError(f"fresh starts a new adapter and parent continues {parent}: give one or the other")
    if fresh:
        return None
    if parent is None:
        return active_version(engine, role)
    try:
        record = get_version(engine, parent)
    except RegistryError as exc:
        raise InputError(f"parent {parent}: {exc}") from exc
    if record.role != role:
        raise InputError(f"parent {parent} is a version of {record.role}, not of {role}: continue one of {role}'s")
    return record


def with_tracker_folder(values: dict, settings: Settings) -> dict:
    """Trainer settings ``values`` with TensorBoard's folder: SPARRING_DATA_DIR/runs when they
    report to a tracker and name no logging_dir (else transformers writes inside the job's
    temporary folder, which is deleted)."""
    from training.trainers.reporting import targets

    if targets(values.get("report_to", "none")):
        return {"logging_dir": str(settings.store_dir / "runs"), **values}
    return values


def _rows_role(trainer: TrainerKind, role: str, answers: str | None) -> str:
    """The role whose turns make the rows: the trained role's own, or for a verifier the ``answers`` role."""
    if not trainer.verifier:
        if answers is not None:
            raise InputError(f"--answers applies to `sparring train reward` only: the {trainer.name} trainer learns "
                             f"from {role}'s own turns")
        return role
    answers = answers or "actor"
    if answers == role:
        raise InputError(f"--role names the verifier's own role and --answers the role whose answers it judges; both "
                         f"are {role!r}. Publish the verifier under a role of its own, e.g. --role {role}-verifier")
    return answers


def _check_row_options(kind: str, dataset: int | None, screen: int | None, *, own_rows: bool,
                       pairs: str | None, baseline: str | None) -> None:
    """Refuse the options that choose rows or tasks where they choose nothing."""
    if screen is not None and kind != "grpo":
        raise InputError(f"--screen chooses the tasks online GRPO plays; {kind} trains on logged rows: leave it out")
    if screen is not None and screen < 1:
        raise InputError(f"--screen plays at least 1 task, got {screen}; leave it out to play every task")
    if dataset is not None and own_rows:
        raise InputError(f"--verdicts, --max-rows, {OWN_ROW_FLAGS} choose the rows of a snapshot this command "
                         f"builds; snapshot {dataset} is built already: leave them out, or build one with `sparring "
                         "datasets build sft` and those options")
    for flag, value, built in (("--pairs", pairs, "dpo"), ("--baseline", baseline, "ppo")):
        if dataset is not None and value is not None:
            raise InputError(f"{flag} chooses the rows of a snapshot this command builds; snapshot {dataset} is "
                             f"built already: leave it out, or build one with `sparring datasets build {built} "
                             f"{flag} ...`")


def _check_launch(trainer: TrainerKind, role: str, dataset: int | None) -> int:
    """This process's rank when `accelerate launch` (or torchrun) started several; 0 otherwise.

    All of them train (TRL's trainers run data-parallel); only rank 0 records the job and
    publishes the adapter, so they must all read one snapshot that exists already.
    """
    from training.trainers.kinds import kind_names

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not trainer.data_parallel:
        raise InputError(
            f"`sparring train {trainer.name}` trains in one process, but accelerate launch started {world}. Run it "
            f"without accelerate launch ({', '.join(kind_names(data_parallel=True))} can use several GPUs)."
        )
    if world > 1 and dataset is None:
        raise InputError(
            f"under accelerate launch all {world} processes must train on one snapshot: build it first with "
            f"`sparring datasets build {trainer.name} --role {role}` and pass its id with --dataset."
        )
    return rank


def _check_processes(kind: str, processes: int, config: TrainingConfig) -> None:
    """SPARRING_TRAIN_PROCESSES above 1: a data-parallel trainer whose optimiser step splits among
    them, outside `accelerate launch` (which starts the processes itself); else InputError."""
    from training.jobs import processes_config

    if processes > 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise InputError(f"SPARRING_TRAIN_PROCESSES={processes} starts the training processes itself; under "
                         "accelerate launch set it to 1 (or run without accelerate launch)")
    try:
        processes_config(kind, processes, config)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _trainer_config(kind: str, config_type: type[TrainingConfig], chosen: Settings, flags: dict[str, Any],
                    config_file: Path | None) -> TrainingConfig:
    """The trainer's config: its defaults, then the settings (model, device, seed), then the
    ``config_file``, then the ``flags`` given. TensorBoard writes to SPARRING_DATA_DIR/runs unless
    the file names a logging_dir."""
    from training.config_file import ConfigFileError, read_config_file

    fields = config_type.__dataclass_fields__
    unknown = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None and k not in fields]
    if unknown:
        raise InputError(f"{', '.join(unknown)} does not apply to the {kind} trainer")
    try:
        from_file = read_config_file(config_file, config_type, kind) if config_file is not None else {}
    except ConfigFileError as exc:
        raise InputError(str(exc)) from exc
    values = {"model": chosen.model, "device": chosen.device, "seed": chosen.seed, **from_file,
              **{k: v for k, v in flags.items() if v is not None}}
    try:
        return config_type(**with_tracker_folder(values, chosen))
    except ValueError as exc:
        where = f" (settings from {config_file} and the options)" if config_file is not None else ""
        raise InputError(str(exc) + where) from exc


def _logged_rows(engine: Engine, chosen: Settings, kind: str, role: str, game: str, dataset: int | None,
                 options: BuilderOptions | None, progress: BuildProgress) -> tuple[Any, int]:
    """The rows of snapshot ``dataset``, else of one built now from the logs newer than the last
    settled snapshot, and its id."""
    from training.datasets import DatasetError, LogFilter, load_snapshot

    if dataset is None:
        dataset = build_rows(engine, chosen, kind, role, game, LogFilter(), for_training=True, options=options,
                             progress=progress).id
    try:
        return load_snapshot(engine, dataset, role=role, base_model=chosen.model, kind=kind), dataset
    except DatasetError as exc:
        raise InputError(str(exc)) from exc


def _online(engine: Engine, chosen: Settings, game: str, role: str, tasks: str | None,
            seats: Mapping[str, str] | Sequence[str] | None, *, screen: int | None, start: str,
            config: TrainingConfig, progress: TrainProgress) -> _Online:
    """What online GRPO needs: the train tasks it plays (those the starting policy ``start``, a
    seat spec, gets wrong, with ``screen``), the other seats' policies and a run that logs every
    rollout episode."""
    from app.wiring import PolicyFactory, SeatSpecError, parse_seat_specs, seat_args
    from graphs.policies.base import SamplingParams
    from graphs.registry import UnknownGameError, get_game
    from graphs.tasks.base import TaskSourceError
    from storage.recorder import Recorder
    from storage.records import RunRecord

    try:
        spec = get_game(game)
        specs = parse_seat_specs(spec, seat_args(seats))
        specs[role] = start  # the policy training starts from
        task_list = spec.tasks.load(tasks or spec.tasks.default, n=screen, seed=chosen.seed, split="train")
    except (UnknownGameError, SeatSpecError, TaskSourceError) as exc:
        raise InputError(str(exc)) from exc
    screened = _screened(engine, chosen, spec, role, task_list, specs, config, progress) if screen else None
    if screened is not None:
        if not screened.kept:
            raise InputError(f"the starting policy got all {screened.played} screened tasks right: nothing left to "
                             "train on; screen more tasks (--screen) or harder ones (--tasks)")
        task_list = screened.kept
    factory = PolicyFactory(chosen, SamplingParams(temperature=0.7), engine)
    others = asyncio.run(factory.policies({s: p for s, p in specs.items() if s != role}))
    recorder = Recorder(engine)
    screen_config = {} if screened is None else {"screen": {"played": screened.played, "kept": len(screened.kept),
                                                            "metric": screened.metric, "run_id": screened.run_id}}
    run = RunRecord.new(spec.name, {"purpose": f"grpo rollouts for {role}", **screen_config}, chosen.seed)
    recorder.start_run(run)

    def close() -> None:
        recorder.finish_run(run.id, "finished", {})
        recorder.close()
        asyncio.run(factory.aclose())

    extra = {"game": game, "other_policies": others, "sink": recorder, "run_id": run.id}
    return _Online(list(task_list), extra, screened, close)


def _screened(engine: Engine, chosen: Settings, spec: GameSpec, role: str, tasks: Sequence[Task],
              specs: dict[str, str], config: TrainingConfig, progress: TrainProgress) -> Screened:
    """``evaluation.screen.not_right`` of ``tasks``: played greedily in the deciding precision,
    at the rollouts' token budget, by the other seats and the policy training starts from."""
    from app.interrupts import run_interruptible
    from app.wiring import PolicyFactory
    from evaluation.evaluator import Evaluator
    from evaluation.screen import ScreenError, not_right
    from graphs.policies.base import SamplingParams

    factory = PolicyFactory(chosen, SamplingParams(temperature=0.0, max_new_tokens=config.max_completion_length),
                            engine, deciding=True)

    async def main() -> Screened:
        try:
            policies = await factory.policies(specs)
            evaluate = Evaluator(engine, spec, list(tasks), chosen.seed, spec.make_options(),
                                 concurrency=config.concurrency, name="screen")
            return await not_right(evaluate, policies, role)
        finally:
            await factory.aclose()

    progress.screening(len(tasks))
    try:
        screened = run_interruptible(main())
    except ScreenError as exc:
        raise InputError(str(exc)) from exc
    progress.screened(screened)
    return screened


def _train_beside(trainer: TrainerKind, rank: int, rows: Any, config: TrainingConfig, chosen: Settings, role: str,
                  parent: AdapterRecord | None, snapshot_id: int | None) -> None:
    """Train as a process of rank > 0 of `accelerate launch` (``training.isolated.train_beside``)."""
    from training.isolated import train_beside

    train_beside(trainer.train, rank, rows, config, role=role, cache_dir=chosen.cache_dir,
                 parent_adapter=parent.path if parent else None, progress=None, dataset_snapshot_id=snapshot_id)


def _run_job(engine: Engine, chosen: Settings, kind: str, role: str, rows: Any, config: TrainingConfig,
             parent: AdapterRecord | None, snapshot_id: int | None, extra: dict[str, Any], progress: TrainProgress,
             ) -> JobResult:
    """The recorded training job (``training.jobs``), its adapter published as a candidate;
    SIGTERM stops it as Ctrl-C does, the job marked failed either way."""
    from app.interrupts import sigterm_as_interrupt
    from training.jobs import TrainingJobError, run_training_job

    progress.training(kind, role)
    try:
        with sigterm_as_interrupt():
            return run_training_job(
                engine, kind=kind, role=role, rows=rows, config=config, adapters_root=chosen.store_dir / "adapters",
                cache_dir=chosen.cache_dir, parent=parent, dataset_snapshot_id=snapshot_id, progress=progress.step,
                extra=extra, processes=chosen.train_processes,
            )
    except TrainingJobError as exc:
        raise RunError(str(exc)) from exc
