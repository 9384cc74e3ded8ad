"""The training commands: datasets build, train, deploy."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from app.commands.common import (
    ConcurrencyOption,
    DbOption,
    FormatOption,
    clean_up_stale_work,
    engine_or_exit,
    err,
    fail,
    one_line,
    out,
    settings_or_exit,
    store_or_exit,
)
from app.commands.game_options import NONE_GIVEN, GameOptionValues, with_game_options
from app.interrupts import exit_when_stopped, run_interruptible, sigterm_as_interrupt
from app.output import Format, emit
from app.progress import progress as progress_display
from app.settings import Settings
from app.wiring import SEAT_SPEC_HELP, PolicyFactory, SeatSpecError, parse_seat_specs

datasets_app = typer.Typer(help="Build training datasets from the logs.", no_args_is_help=True)


VerdictsOption = Annotated[
    str | None,
    typer.Option(help="sft: 'own' (default), the role's own best turns; 'truth', for a judge-like seat "
                      "(math-reflection's critic), reviews of the answers of the seat it judges that were checked "
                      "against the ground truth, with the verdict the truth calls for, balanced at each difficulty.",
                 show_default=False),
]
MaxRowsOption = Annotated[
    int | None,
    typer.Option(min=2, help="sft --verdicts truth: the most rows (a seeded choice that keeps them balanced).",
                 show_default=False),
]
RefinementsOption = Annotated[
    bool,
    typer.Option("--refinements",
                 help="sft: also teach the role's refinement turn (math-reflection's actor): for each task it "
                      "answered both right and wrong at its first turn, the prompt after a rejection of a wrong "
                      "answer and after a rejection of a right one, each answered with a right answer; and each "
                      "wrong answer the game can correct (math-reflection: its written arithmetic recomputed "
                      "makes it right) after its rejection, answered with the corrected answer."),
]
FirstRepairsOption = Annotated[
    bool,
    typer.Option("--first-repairs",
                 help="sft: a wrong first answer the game corrects to the right one (math-reflection: its "
                      "written arithmetic recomputed) also answers its own first prompt, where no answer to that "
                      "prompt was right."),
]
OWN_ROW_FLAGS = "--refinements, --first-repairs and --answer-lines"
AnswerLinesOption = Annotated[
    bool,
    typer.Option("--answer-lines",
                 help="sft: every right answer of the refining role ends with the final line its prompt asks for "
                      "(math-reflection: 'Answer: <the ground truth>' added where the answer's last line is not "
                      "one)."),
]
PairsOption = Annotated[
    str | None,
    typer.Option(help="dpo: the pairs of a group of samples of one state (same seat, same prompt): 'extremes' "
                      "(default), the best-credited sample against the worst, one pair per group; 'all', every "
                      "sample against every sample of lower credit (2 right and 2 wrong answers: 4 pairs).",
                 show_default=False),
]


def _sft_options(kind: str, game: str, role: str, verdicts: str | None, max_rows: int | None,
                 refinements: bool = False, first_repairs: bool = False, answer_lines: bool = False):
    """The SFT builder's options from --verdicts, --max-rows, --refinements, --first-repairs and
    --answer-lines (None: the builder's defaults)."""
    if verdicts is None and max_rows is None and not (refinements or first_repairs or answer_lines):
        return None
    if kind != "sft":
        fail(f"--verdicts, --max-rows, {OWN_ROW_FLAGS} apply to sft rows only, not to {kind}")
    if max_rows is not None and verdicts != "truth":
        fail("--max-rows caps the rows of --verdicts truth only: add --verdicts truth, or leave --max-rows out")
    from graphs.game import GameContractError
    from graphs.games import UnknownGameError
    from training.datasets import SFTOptions
    from training.datasets.sft import refinements_of
    from training.datasets.truth_verdicts import truth_verdicts_of

    try:
        options = SFTOptions(verdicts=verdicts or "own", max_rows=max_rows, refinements=refinements,
                             first_repairs=first_repairs, answer_lines=answer_lines)
        if options.verdicts == "truth":
            truth_verdicts_of(game, role)
        if refinements or first_repairs or answer_lines:
            refinements_of(game, role, answer_line=answer_lines)
    except (GameContractError, UnknownGameError, ValueError) as exc:
        fail(str(exc))
    return options


def _dpo_options(kind: str, pairs: str | None):
    """The DPO builder's options from --pairs (None: the builder's defaults)."""
    if pairs is None:
        return None
    if kind != "dpo":
        fail(f"--pairs applies to dpo rows only, not to {kind}")
    from training.datasets import DPOOptions

    try:
        return DPOOptions(group_pairs=pairs)
    except ValueError as exc:
        fail(str(exc).replace("group_pairs", "--pairs", 1))


def _build(engine, settings: Settings, kind: str, role: str, game: str, since: str, log_filter, *,
           for_training: bool = False, options=None):
    from training.datasets import EmptyDatasetError, build_snapshot

    try:
        with err.status(f"building {kind} rows for {role} from {game} logs…"):
            return build_snapshot(
                engine,
                kind,
                role,
                game=game,
                base_model=settings.model,
                out_dir=settings.store_dir / "datasets",
                since=None if since == "all" else "latest",
                log_filter=log_filter,
                seed=settings.seed,
                for_training=for_training,
                options=options,
            )
    except EmptyDatasetError as exc:
        fail(str(exc))


def _log_filter(split: str, evaluation_data: bool, policy: str | None):
    from training.datasets import EvaluationDataError, LogFilter

    try:
        return LogFilter(policy=policy, split=None if split == "all" else split, evaluation_data=evaluation_data)
    except EvaluationDataError as exc:
        fail(str(exc).replace("evaluation_data=True", "--train-on-eval-data"))


@datasets_app.command("build")
def datasets_build(
    kind: Annotated[str, typer.Argument(help="dpo, kto, ppo, sft or reward.")],
    role: Annotated[str, typer.Option(help="The learner role (seat) the rows train.")],
    game: Annotated[str, typer.Option(help="Game whose logs are read.")] = "math-reflection",
    since: Annotated[str, typer.Option(help="'latest': only what is newer than the last snapshot; 'all'.")] = "latest",
    split: Annotated[
        str,
        typer.Option(
            help="Task split read: 'train'. Any other ('eval', 'heldout', 'all') needs --train-on-eval-data."
        ),
    ] = "train",
    train_on_eval_data: Annotated[
        bool,
        typer.Option(
            "--train-on-eval-data",
            help="Allow a --split other than 'train'. Evaluation episodes (task files played without "
            "--split train, held-out problems) then become training rows, and every later figure measured on "
            "those tasks is worthless.",
        ),
    ] = False,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Only the role's turns of this policy, matched exactly: an adapter version (actor@v1, not "
            "actor@v10) or 'base' (no adapter).",
            show_default=False,
        ),
    ] = None,
    verdicts: VerdictsOption = None,
    max_rows: MaxRowsOption = None,
    refinements: RefinementsOption = False,
    first_repairs: FirstRepairsOption = False,
    answer_lines: AnswerLinesOption = False,
    pairs: PairsOption = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Build a dataset snapshot (TRL conversational JSONL) for one role from the logs.

    Reads the role's model turns (never a scripted bot's) in succeeded episodes of split
    'train'.

    Examples:

    * `sparring datasets build sft --role actor`
    * `sparring datasets build dpo --role critic --since all --format json`
    * `sparring datasets build ppo --role actor --policy actor@v2`
    * `sparring datasets build sft --role critic --verdicts truth --max-rows 128`
      (the critic's rows from the actor's checked answers; --policy then picks the actor's turns)
    * `sparring datasets build sft --role actor --refinements`
      (after `sparring play ... --samples 2`: the refinement turn learns to fix, keep and repair)
    * `sparring datasets build sft --role actor --first-repairs` (wrong first answers whose
      arithmetic, recomputed, makes them right answer their own question too)
    * `sparring datasets build dpo --role actor --pairs all` (after `sparring play ... --samples 4`:
      every right answer to a question against every wrong one)
    """
    if kind not in ("dpo", "kto", "ppo", "sft", "reward"):
        fail(f"unknown dataset kind {kind!r}; kinds: dpo, kto, ppo, sft, reward")
    if since not in ("latest", "all"):
        fail(f"--since {since!r}: use 'latest' or 'all'")
    options = _sft_options(kind, game, role, verdicts, max_rows, refinements, first_repairs, answer_lines)
    options = _dpo_options(kind, pairs) or options
    log_filter = _log_filter(split, train_on_eval_data, policy)
    settings = settings_or_exit(database_url=db)
    snapshot = _build(store_or_exit(settings), settings, kind, role, game, since, log_filter, options=options)
    row = {
        "snapshot": snapshot.id,
        "kind": str(snapshot.kind),
        "role": role,
        "rows": snapshot.row_count,
        "episodes_read": snapshot.episodes_read,
        "skipped": snapshot.skipped,
        "path": str(snapshot.path),
    }
    emit([row], fmt, title="dataset snapshot")


@datasets_app.command("list")
def datasets_list(
    role: Annotated[str | None, typer.Option(help="Only this role's snapshots.", show_default=False)] = None,
    kind: Annotated[str | None, typer.Option(help="Only this kind (dpo, kto, ppo, sft, reward).")] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List dataset snapshots, newest first, with the training jobs that used them.

    A snapshot is settled once a job trained on it successfully (or, built by `datasets build`,
    while no job has tried it): the next build reads only what is newer than the newest settled
    one. A snapshot whose jobs failed or were killed is not, so its rows are read again.

    Examples:

    * `sparring datasets list`
    * `sparring datasets list --role actor --kind sft --format json`
    """
    from training.datasets.snapshots import list_snapshots

    if kind is not None and kind not in ("dpo", "kto", "ppo", "sft", "reward"):
        fail(f"unknown dataset kind {kind!r}; kinds: dpo, kto, ppo, sft, reward")
    snapshots = list_snapshots(engine_or_exit(db), kind=kind, role=role)
    rows = [
        {
            "snapshot": s.id,
            "kind": s.kind,
            "role": s.role,
            "rows": s.row_count,
            "created_at": s.created_at,
            "watermark": s.watermark,
            "jobs": (
                ", ".join(f"#{job} {status}" for job, status in s.jobs) or "none"
                if fmt == Format.table
                else [{"job": job, "status": status} for job, status in s.jobs]
            ),
            "settled": s.settled,
            "path": s.path,
        }
        for s in snapshots
    ]
    emit(rows, fmt, columns=["snapshot", "kind", "role", "rows", "created_at", "jobs", "settled"], title="datasets")


def train(
    kind: Annotated[str, typer.Argument(help="Trainer: sft, dpo, kto, ppo (from logs), grpo (online) or reward "
                                             "(a verifier).")],
    role: Annotated[str, typer.Option(help="The learner role whose adapter is trained (reward: the verifier's own "
                                           "role).")],
    answers: Annotated[
        str | None,
        typer.Option(help="reward: the role whose answers, checked against the ground truth, the verifier learns "
                          "to judge (default: actor).", show_default=False),
    ] = None,
    dataset: Annotated[int | None, typer.Option(help="Snapshot id; default: build one from new logs.")] = None,
    verdicts: VerdictsOption = None,
    max_rows: MaxRowsOption = None,
    refinements: RefinementsOption = False,
    first_repairs: FirstRepairsOption = False,
    answer_lines: AnswerLinesOption = False,
    pairs: PairsOption = None,
    game: Annotated[str, typer.Option(help="Game whose logs are read (grpo: the game played).")] = "math-reflection",
    tasks: Annotated[str | None, typer.Option(help="grpo: task source played (train split; default: the game's "
                                                   "own).", show_default=False)] = None,
    seat: Annotated[
        list[str] | None, typer.Option("--seat", "-s", help="grpo: the other seats. " + SEAT_SPEC_HELP)
    ] = None,
    screen: Annotated[
        int | None,
        typer.Option(min=1, help="grpo: first play this many tasks of --tasks once, greedily, with the policy "
                     "training starts from, and train only on those it does not get right (logged as an "
                     "evaluation run).", show_default=False),
    ] = None,
    learning_rate: Annotated[float | None, typer.Option(help="Default: the trainer's.")] = None,
    epochs: Annotated[float | None, typer.Option(help="Passes over the dataset.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many optimiser steps.")] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Stop after this many seconds of training.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Rows per device per step.")] = None,
    beta: Annotated[float | None, typer.Option(help="dpo/kto: strength of the tie to the reference.")] = None,
    rpo_alpha: Annotated[float | None, typer.Option(help="dpo: weight of an NLL term on the chosen side.")] = None,
    report_to: Annotated[
        str | None,
        typer.Option(help="Experiment trackers, comma-separated: tensorboard (event files in "
                     "SPARRING_DATA_DIR/runs), wandb, mlflow, all… (default none).", show_default=False),
    ] = None,
    fresh: Annotated[bool, typer.Option(help="Start a new adapter instead of continuing the active one.")] = False,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="YAML file of trainer settings (the trainer config's fields: lora, "
                     "max_length, loss_type...; trl: further TRL arguments); the options above override it.",
                     show_default=False),
    ] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Train a LoRA adapter for one role and publish it as a candidate version.

    The adapter continues from the role's active version unless `--fresh`. Deploy it with
    `sparring deploy ROLE`, which gates it against the active version on held-out tasks.
    `reward` trains a verifier (a reward model) on the --answers role's answers, correct and
    incorrect ones paired at each difficulty, and publishes it under --role: it fills the judge
    seat of debate or ensemble (`--seat judge=verifier:ROLE@vN`), and `sparring eval-verifier`
    measures it against the rule verifier.

    Examples:

    * `sparring train sft --role actor`
    * `sparring train dpo --role critic --rpo-alpha 1.0 --epochs 2`
    * `sparring train ppo --role actor --dataset 12 --learning-rate 1e-5`
    * `sparring train grpo --game math-reflection --role actor --max-steps 24`
    * `sparring train grpo --role actor --tasks arithmetic:1 --screen 400 --seat critic=scripted:always-correct`
      (GRPO on the problems among 400 whose greedy first answer is wrong)
    * `sparring train reward --role verifier --answers actor` (publishes verifier@v1)
    * `sparring train sft --role critic --verdicts truth --max-rows 128` (the critic learns the
      ground truth about the actor's checked answers)
    * `sparring train sft --role actor --refinements` (after `sparring play ... --samples 2`: the
      actor's refinement turn learns to fix, keep and repair answers)
    * `sparring train dpo --role actor --pairs all` (every right answer to a question against
      every wrong one, not only the first of each)
    * `sparring train dpo --role critic --config dpo.yaml`, with dpo.yaml holding for instance
      `loss_type: ipo`, `lora: {r: 32, alpha: 64}` and `trl: {lr_scheduler_type: cosine}`
    * `accelerate launch --multi_gpu --num_processes 4 -m app.cli train sft --role actor --dataset 12`
      (sft, dpo, kto on 4 GPUs; build the snapshot first with `sparring datasets build`)
    """
    from training.jobs import TrainingJobError, run_training_job
    from training.trainers.kinds import trainer_kind

    try:
        trainer = trainer_kind(kind)
    except ValueError as exc:
        fail(str(exc))
    rows_role = _rows_role(trainer, role, answers)
    if screen is not None and kind != "grpo":
        fail(f"--screen chooses the tasks online GRPO plays; {kind} trains on logged rows: leave it out")
    if dataset is not None and (verdicts is not None or max_rows is not None or refinements or first_repairs
                                or answer_lines):
        fail(f"--verdicts, --max-rows, {OWN_ROW_FLAGS} choose the rows of a snapshot this command builds; "
             f"snapshot {dataset} is built already: leave them out, or build one with `sparring datasets build sft` "
             "and those options")
    if dataset is not None and pairs is not None:
        fail(f"--pairs chooses the pairs of a snapshot this command builds; snapshot {dataset} is built already: "
             "leave it out, or build one with `sparring datasets build dpo --pairs ...`")
    sft_options = _sft_options(kind, game, rows_role, verdicts, max_rows, refinements, first_repairs, answer_lines)
    build_options = _dpo_options(kind, pairs) or sft_options
    rank = _check_launch(trainer, rows_role, dataset)
    settings = settings_or_exit(database_url=db)
    options = {
        "learning_rate": learning_rate,
        "num_train_epochs": epochs,
        "max_steps": max_steps,
        "max_seconds": max_seconds,
        "per_device_train_batch_size": batch_size,
        "beta": beta,
        "rpo_alpha": rpo_alpha,
        "report_to": tuple(report_to.split(",")) if report_to else None,
    }
    config = _trainer_config(kind, trainer.config_type, settings, options, config_file)
    engine = store_or_exit(settings)
    if rank == 0:
        clean_up_stale_work(engine)

    from training.registry import active_version

    if not trainer.reads_snapshot:
        rows, snapshot_id, extra, cleanup = _online(engine, settings, game, role, tasks, seat or [],
                                                    screen=screen, fresh=fresh, config=config)
    else:
        from training.datasets import DatasetError, LogFilter, load_snapshot

        snapshot_id = (
            dataset
            if dataset is not None
            else _build(engine, settings, kind, rows_role, game, "latest", LogFilter(), for_training=True,
                        options=build_options).id
        )
        try:
            rows = load_snapshot(engine, snapshot_id, role=rows_role, base_model=settings.model, kind=kind)
        except DatasetError as exc:
            fail(str(exc))
        extra, cleanup = {}, lambda: None
    parent = None if fresh else active_version(engine, role)
    if rank != 0:  # the other processes of `accelerate launch` train beside the main one, which alone records
        with tempfile.TemporaryDirectory(prefix=f"sparring-rank{rank}-") as work:
            trainer.train(
                rows, config, role=role, output_dir=Path(work) / "adapter", cache_dir=settings.cache_dir,
                parent_adapter=parent.path if parent else None, progress=None, dataset_snapshot_id=snapshot_id,
            )
        return
    progress = progress_display(
        TextColumn(f"[bold]train {kind} {role}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
    )
    with progress:
        bar = progress.add_task("train", total=None)
        try:
            with exit_when_stopped("interrupted: the training job is marked failed"), sigterm_as_interrupt():
                result = run_training_job(
                    engine,
                    kind=kind,
                    role=role,
                    rows=rows,
                    config=config,
                    adapters_root=settings.store_dir / "adapters",
                    cache_dir=settings.cache_dir,
                    parent=parent,
                    dataset_snapshot_id=snapshot_id,
                    progress=lambda step, total: progress.update(bar, completed=step, total=total),
                    extra=extra,
                )
        except TrainingJobError as exc:
            fail(str(exc), code=1)
        finally:
            cleanup()
    row = {
        "adapter": result.adapter.name,
        "job": result.job_id,
        "dataset": snapshot_id,
        "rows": len(rows),
        "parent": parent.name if parent else None,
        **result.metrics,
    }
    emit(
        [row] if fmt != Format.table else [{"metric": k, "value": v} for k, v in row.items()],
        fmt,
        title="training job",
        console=out,
    )
    if fmt == Format.table and trainer.verifier:
        err.print(
            f"published the verifier {result.adapter.name}; it judges debates with `sparring play debate --seat "
            f"judge=verifier:{result.adapter.name}`; its agreement with the rule verifier on held-out answers: "
            f"`sparring eval-verifier {result.adapter.name}`"
        )
    elif fmt == Format.table:
        err.print(
            f"published {result.adapter.name} as a candidate; gate and deploy it with "
            f"`sparring deploy {role} --candidate {result.adapter.name}`; its loss per step: "
            f"`sparring jobs show {result.job_id}`"
        )


def _rows_role(trainer, role: str, answers: str | None) -> str:
    """The role whose turns make the rows: the trained role's own, or for a verifier the --answers role."""
    if not trainer.verifier:
        if answers is not None:
            fail(f"--answers applies to `sparring train reward` only: the {trainer.name} trainer learns from "
                 f"{role}'s own turns")
        return role
    answers = answers or "actor"
    if answers == role:
        fail(f"--role names the verifier's own role and --answers the role whose answers it judges; both are "
             f"{role!r}. Publish the verifier under a role of its own, e.g. --role {role}-verifier")
    return answers


def _trainer_config(kind: str, config_type: type, settings: Settings, flags: dict, config_file: Path | None):
    """The trainer's config: its defaults, then the settings (model, device, seed), then the
    --config file, then the flags given. TensorBoard writes to SPARRING_DATA_DIR/runs unless
    the file names a logging_dir."""
    from training.config_file import ConfigFileError, read_config_file

    fields = config_type.__dataclass_fields__
    unknown = [f"--{k.replace('_', '-')}" for k, v in flags.items() if v is not None and k not in fields]
    if unknown:
        fail(f"{', '.join(unknown)} does not apply to the {kind} trainer")
    try:
        from_file = read_config_file(config_file, config_type, kind) if config_file is not None else {}
    except ConfigFileError as exc:
        fail(str(exc))
    values = {"model": settings.model, "device": settings.device, "seed": settings.seed, **from_file,
              **{k: v for k, v in flags.items() if v is not None}}
    try:
        return config_type(**with_tracker_folder(values, settings))
    except ValueError as exc:
        fail(str(exc) + (f" (settings from {config_file} and the options)" if config_file is not None else ""))


def with_tracker_folder(values: dict, settings: Settings) -> dict:
    """Trainer settings ``values`` with TensorBoard's folder: SPARRING_DATA_DIR/runs when they
    report to a tracker and name no logging_dir (else transformers writes inside the job's
    temporary folder, which is deleted)."""
    from training.trainers.reporting import targets

    if targets(values.get("report_to", "none")):
        return {"logging_dir": str(settings.store_dir / "runs"), **values}
    return values


def _check_launch(trainer, role: str, dataset: int | None) -> int:
    """This process's rank when `accelerate launch` (or torchrun) started several; 0 otherwise.

    All of them train (TRL's trainers run data-parallel); only rank 0 records the job and
    publishes the adapter, so they must all read one snapshot that exists already.
    """
    from training.trainers.kinds import kind_names

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not trainer.data_parallel:
        fail(
            f"`sparring train {trainer.name}` trains in one process, but accelerate launch started {world}. Run it "
            f"without accelerate launch ({', '.join(kind_names(data_parallel=True))} can use several GPUs)."
        )
    if world > 1 and dataset is None:
        fail(
            f"under accelerate launch all {world} processes must train on one snapshot: build it first with "
            f"`sparring datasets build {trainer.name} --role {role}` and pass its id with --dataset."
        )
    return rank


def _online(engine, settings: Settings, game: str, role: str, tasks: str, seats: list[str], *,
            screen: int | None, fresh: bool, config):
    """What online GRPO needs: the train tasks it plays (those the starting policy gets wrong,
    with ``screen``), the other seats' policies and a run that logs every rollout episode;
    returns (tasks, None, trainer kwargs, cleanup)."""
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.base import SamplingParams
    from graphs.tasks.base import TaskSourceError
    from storage.recorder import Recorder
    from storage.records import RunRecord

    try:
        spec = get_game(game)
        specs = parse_seat_specs(spec, seats)
        specs[role] = "model:base" if fresh else "model"  # the policy training starts from
        task_list = spec.tasks.load(tasks or spec.tasks.default, n=screen, seed=settings.seed, split="train")
    except (UnknownGameError, SeatSpecError, TaskSourceError) as exc:
        fail(str(exc))
    screened = _screened(engine, settings, spec, role, task_list, specs, config) if screen else None
    if screened is not None:
        err.print(screened.describe())
        if not screened.kept:
            fail(f"the starting policy got all {screened.played} screened tasks right: nothing left to train on; "
                 "screen more tasks (--screen) or harder ones (--tasks)")
        task_list = screened.kept
    factory = PolicyFactory(settings, SamplingParams(temperature=0.7), engine)
    others = asyncio.run(factory.policies({s: p for s, p in specs.items() if s != role}))
    recorder = Recorder(engine)
    screen_config = {} if screened is None else {"screen": {"played": screened.played, "kept": len(screened.kept),
                                                            "metric": screened.metric, "run_id": screened.run_id}}
    run = RunRecord.new(spec.name, {"purpose": f"grpo rollouts for {role}", **screen_config}, settings.seed)
    run_id = run.id
    recorder.start_run(run)

    def cleanup() -> None:
        recorder.finish_run(run_id, "finished", {})
        recorder.close()
        asyncio.run(factory.aclose())

    return task_list, None, {"game": game, "other_policies": others, "sink": recorder, "run_id": run_id}, cleanup


def _screened(engine, settings: Settings, spec, role: str, tasks, specs: dict[str, str], config):
    """``evaluation.screen.not_right`` of ``tasks``: played greedily in the deciding precision,
    at the rollouts' token budget, by the other seats and the policy training starts from."""
    from evaluation.evaluator import Evaluator
    from evaluation.screen import ScreenError, not_right
    from graphs.policies.base import SamplingParams

    factory = PolicyFactory(settings, SamplingParams(temperature=0.0, max_new_tokens=config.max_completion_length),
                            engine, deciding=True)

    async def main():
        try:
            with err.status(f"screening {len(tasks)} tasks…"):
                policies = await factory.policies(specs)
                evaluate = Evaluator(engine, spec, list(tasks), settings.seed, spec.make_options(),
                                     concurrency=config.concurrency, name="screen")
                return await not_right(evaluate, policies, role)
        finally:
            await factory.aclose()

    try:
        with exit_when_stopped("interrupted: the screen's run is marked interrupted"):
            return run_interruptible(main())
    except ScreenError as exc:
        fail(str(exc))


@with_game_options()
def deploy(
    role: Annotated[str, typer.Argument(help="Role whose newest candidate is gated and deployed.")],
    candidate: Annotated[str | None, typer.Option(help="A candidate version (default: the newest).")] = None,
    game: Annotated[str, typer.Option(help="Game the versions are evaluated on.")] = "math-reflection",
    tasks: Annotated[str | None, typer.Option(help="Held-out task source (default: the game's own).",
                                              show_default=False)] = None,
    eval_tasks: Annotated[int, typer.Option(
        min=1, help="Tasks of each evaluation set each version plays (the arithmetic generator: its unseen "
                    "wordings, the deciding set, and held-out problems in the training wordings).")] = 64,
    margin: Annotated[float, typer.Option(min=0.0, help="How much worse than the active version is tolerated.")] = 0.0,
    guard: Annotated[list[str] | None, typer.Option(
        "--guard", help="A further task source both versions play, repeatable (e.g. gsm8k_test.jsonl): a family "
                        "worse beyond noise there refuses the candidate.", show_default=False)] = None,
    game_options: GameOptionValues = NONE_GIVEN,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens per model turn.")] = 160,
    concurrency: ConcurrencyOption = 256,
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", help=SEAT_SPEC_HELP)] = None,
    eval_script: Annotated[str | None, typer.Option(
        help="External game: the command line of your evaluation, run twice through a gateway started here, "
             "the role played by the candidate, then by the active version (SPARRING_GATEWAY_URL, "
             "SPARRING_GATEWAY_MODEL, SPARRING_GATEWAY_ROLE, SPARRING_GATEWAY_SPLIT in its environment).",
        show_default=False)] = None,
    metric: Annotated[str, typer.Option(
        help="External game: what the gate compares, per task: 'reward', each episode's headline reward (sent "
             "with its end), or the name of a reward the role's seat gets.")] = "reward",
    candidate_run: Annotated[str | None, typer.Option(
        help="External game, instead of --eval-script: the run of evaluation episodes the candidate played.",
        show_default=False)] = None,
    baseline_run: Annotated[str | None, typer.Option(
        help="External game, with --candidate-run: the run the active version (or base) played.",
        show_default=False)] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Gate a candidate against the active version on held-out tasks (same seeds, greedy) and
    promote it only if it is not worse by more than --margin on the deciding set and no task
    family got worse beyond noise on any set; otherwise mark it rejected. The in-process model
    plays in float32 (SPARRING_EVAL_DTYPE), so that no answer depends on what shares its batch.

    An external game (played through `sparring gateway`, not registered) is gated by your own
    evaluation: --eval-script plays it once per version, its episodes of split eval, and the
    two runs are compared paired by task id on --metric, with the same rule. A script that
    fails, logs no episode or leaves an episode unscored, or runs of different tasks, leave
    the candidate a candidate. Manual: docs/gateway.md.

    Examples:

    * `sparring deploy actor`
    * `sparring deploy critic --candidate critic@v4 --eval-tasks 200 --margin 0.01`
    * `sparring deploy actor --guard gsm8k_test.jsonl`
    * `sparring deploy solver --game review --eval-script "python examples/langgraph_review.py"`
    * `sparring deploy solver --game review --metric correct --candidate-run 3f2a... --baseline-run 9c1b...`
    """
    from app.commands.external_game import deploy_external, refuse_registered_options, registered

    if not registered(game):
        refuse_registered_options(game, {"--tasks": tasks is not None, "--guard": bool(guard), "--seat": bool(seat)})
        _print_gate(deploy_external(role, candidate, game, eval_script=eval_script, candidate_run=candidate_run,
                                    baseline_run=baseline_run, metric=metric, margin=margin, db=db), role, fmt)
        return
    if eval_script is not None or candidate_run is not None or baseline_run is not None or metric != "reward":
        fail(f"--eval-script, --candidate-run, --baseline-run and --metric gate an external game; {game!r} is "
             "registered: its gate plays its held-out tasks (--tasks, --eval-tasks, --guard) on its own metric")
    from evaluation.task_sets import evaluation_sets, evaluators
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.adapter_folder import AdapterFolderError
    from graphs.policies.base import BackendError, SamplingParams
    from graphs.tasks.base import TaskSourceError
    from training.deploy import GateError, LivePolicies, gate_and_deploy
    from training.registry import RegistryError, get_version, newest_candidate

    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    clean_up_stale_work(engine)
    try:
        spec = get_game(game)
        options = game_options.make(spec)
        seat_specs = parse_seat_specs(spec, seat or [], options=options)
        task_sets = evaluation_sets(spec, tasks or spec.tasks.default, eval_tasks, settings.seed, guard or ())
        chosen = get_version(engine, candidate) if candidate else newest_candidate(engine, role)
    except (UnknownGameError, SeatSpecError, TaskSourceError, RegistryError, ValueError) as exc:
        fail(str(exc))
    if chosen is None:
        fail(f"role {role!r} has no candidate version; train one with `sparring train sft --role {role}`")
    if chosen.is_verifier:
        fail(f"{chosen.name} is a verifier, which no game's gate measures: measure it with `sparring eval-verifier "
             f"{chosen.name}`, then promote it by hand with `sparring adapters promote {chosen.name}`")
    factory = PolicyFactory(settings, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens), engine,
                            deciding=True)

    async def main():
        try:
            sizes = " and ".join(f"{len(t)} {name}" for name, t in task_sets.items())
            with err.status(f"evaluating {chosen.name} against the active {role} on {sizes} tasks…"):
                live = LivePolicies(await factory.policies(seat_specs))
                evaluate, *guards = evaluators(engine, spec, task_sets, settings.seed, options, concurrency)
                return await gate_and_deploy(engine, chosen, factory.model_backend(), live, evaluate, margin=margin,
                                             guards=guards)
        finally:
            await factory.aclose()

    try:
        with exit_when_stopped(f"interrupted while deploying {chosen.name}: its unfinished gate runs are marked "
                               "interrupted; `sparring adapters list` shows its status"):
            result = run_interruptible(main())
    except (GateError, RegistryError) as exc:
        fail(str(exc))
    except AdapterFolderError as exc:  # its message says how to recover: restore or reject the candidate
        fail(f"cannot deploy {chosen.name}: {one_line(exc)}", code=1)
    except BackendError as exc:
        fail(f"cannot deploy {chosen.name}: {one_line(exc)} To set this candidate aside (deploy then takes the "
             f"newest other one): `sparring adapters reject {chosen.name}`", code=1)
    _print_gate(result, role, fmt)


def _print_gate(result, role: str, fmt: Format) -> None:
    row = {
        "candidate": result.candidate,
        "baseline": result.baseline,
        "metric": result.metric,
        "candidate_value": result.candidate_value,
        "baseline_value": result.baseline_value,
        "margin": result.margin,
        "decision": "promoted" if result.promoted else "rejected",
        "reason": result.reason,
    }
    emit([row], fmt, columns=["candidate", "baseline", "metric", "decision"], title=f"deploy {role}",
         caption=result.reason, console=out)  # the figures are in the reason; json has every key
