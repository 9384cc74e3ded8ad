"""The training commands: datasets build, train, deploy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.status import Status

from app import api
from app.api.datasets import KINDS, build_dataset
from app.api.deploy import deploy as deploy_candidate
from app.api.train import train as train_adapter
from app.commands.common import ConcurrencyOption, DbOption, FormatOption, engine_or_exit, err, fail, out
from app.commands.game_options import NONE_GIVEN, GameOptionValues, with_game_options
from app.interrupts import exit_when_stopped
from app.output import Format, emit
from app.progress import progress as progress_display
from app.wiring import SEAT_SPEC_HELP

if TYPE_CHECKING:
    from app.api.train import TrainResult
    from evaluation.screen import Screened
    from training.deploy import GateResult

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
BaselineOption = Annotated[
    str | None,
    typer.Option(help="ppo: what a row's reward is compared with for its advantage: 'group' (default), the "
                      "samples of its state (same seat, same prompt), so a group whose samples all scored alike "
                      "teaches nothing; 'batch', every row of the snapshot.", show_default=False),
]


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
    baseline: BaselineOption = None,
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
    * `sparring datasets build ppo --role actor --baseline batch` (advantages against the whole
      snapshot's mean reward: right answers to problems always answered right count too)
    """
    try:
        with _Display() as display:
            snapshot = build_dataset(
                kind, role=role, game=game, since=since, split=split, train_on_eval_data=train_on_eval_data,
                policy=policy, verdicts=verdicts, max_rows=max_rows, refinements=refinements,
                first_repairs=first_repairs, answer_lines=answer_lines, pairs=pairs, baseline=baseline, database_url=db,
                progress=display,
            )
    except api.InputError as exc:
        fail(str(exc))
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

    if kind is not None and kind not in KINDS:
        fail(f"unknown dataset kind {kind!r}; kinds: {', '.join(KINDS)}")
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
    baseline: BaselineOption = None,
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
    parent: Annotated[
        str | None,
        typer.Option(metavar="ROLE@vN", help="Continue this version of the role, a candidate too, instead of the "
                     "active one.", show_default=False),
    ] = None,
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

    The adapter continues the role's active version, or the version --parent names; `--fresh`
    starts a new one. Deploy it with `sparring deploy ROLE`, which gates it against the active
    version on held-out tasks.
    `reward` trains a verifier (a reward model) on the --answers role's answers, correct and
    incorrect ones paired at each difficulty, and publishes it under --role: it fills the judge
    seat of debate or ensemble (`--seat judge=verifier:ROLE@vN`), and `sparring eval-verifier`
    measures it against the rules judge.

    Examples:

    * `sparring train sft --role actor`
    * `sparring train dpo --role critic --rpo-alpha 1.0 --epochs 2`
    * `sparring train ppo --role actor --dataset 12 --learning-rate 1e-5`
    * `sparring train ppo --role actor --baseline batch --config ppo.yaml`, with ppo.yaml holding
      for instance `clip_eps_high: 10.0` (a right answer's tokens rise past the clip, a wrong
      one's fall by at most clip_eps) or `objective: reinforce`
    * `sparring train sft --role actor --parent actor@v3` (continues the candidate actor@v3,
      not the active version)
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
    display = _Display()
    try:
        with _exit_when_stopped(display), display:
            result = train_adapter(
                kind, role=role, answers=answers, dataset=dataset, verdicts=verdicts, max_rows=max_rows,
                refinements=refinements, first_repairs=first_repairs, answer_lines=answer_lines, pairs=pairs,
                baseline=baseline, game=game, tasks=tasks, seats=seat or [], screen=screen,
                learning_rate=learning_rate, epochs=epochs, max_steps=max_steps, max_seconds=max_seconds,
                batch_size=batch_size, beta=beta, rpo_alpha=rpo_alpha, report_to=report_to, fresh=fresh,
                parent=parent, config_file=config_file, database_url=db, progress=display,
            )
    except api.InputError as exc:
        fail(str(exc))
    except api.RunError as exc:
        fail(str(exc), code=1)
    if result is not None:  # None: a process of rank > 0 under accelerate launch, which trained beside rank 0
        _print_trained(result, fmt)


def _print_trained(result: TrainResult, fmt: Format) -> None:
    row = {
        "adapter": result.adapter.name,
        "job": result.job_id,
        "dataset": result.dataset,
        "rows": result.rows,
        "parent": result.parent,
        **result.metrics,
    }
    emit(
        [row] if fmt != Format.table else [{"metric": k, "value": v} for k, v in row.items()],
        fmt,
        title="training job",
        console=out,
    )
    if fmt == Format.table and result.adapter.is_verifier:
        err.print(
            f"published the verifier {result.adapter.name}; it judges debates with `sparring play debate --seat "
            f"judge=verifier:{result.adapter.name}`; its agreement with the rules judge on held-out answers: "
            f"`sparring eval-verifier {result.adapter.name}`"
        )
    elif fmt == Format.table:
        err.print(
            f"published {result.adapter.name} as a candidate; gate and deploy it with "
            f"`sparring deploy {result.role} --candidate {result.adapter.name}`; its loss per step: "
            f"`sparring jobs show {result.job_id}`"
        )


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
    plays so that no answer depends on what shares its batch (SPARRING_EVAL_DTYPE: float32, or
    with auto batch-invariant bfloat16 on a CPU where bfloat16 is measured faster).

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
    display = _Display(role)
    try:
        with _exit_when_stopped(display), display:
            result = deploy_candidate(
                role, candidate=candidate, game=game, tasks=tasks, eval_tasks=eval_tasks, margin=margin,
                guards=guard or (), options=game_options.given, max_new_tokens=max_new_tokens,
                concurrency=concurrency, seats=seat or [], eval_script=eval_script, metric=metric,
                candidate_run=candidate_run, baseline_run=baseline_run, database_url=db, progress=display,
            )
    except api.InputError as exc:
        fail(str(exc))
    except api.RunError as exc:
        fail(str(exc), code=1)
    _print_gate(result, role, fmt)


def _print_gate(result: GateResult, role: str, fmt: Format) -> None:
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


class _Display:
    """The commands' progress (``BuildProgress``, ``TrainProgress``, ``DeployProgress``): a
    spinner while rows are built, tasks screened or versions gated, then a bar of the training
    steps. ``stopping`` says what an interrupt of the phase running now leaves marked (None: an
    interrupt there is raised as it is)."""

    def __init__(self, role: str = "") -> None:
        self.role = role
        """the role deployed (its gate's spinner names it)"""
        self.status: Status | None = None
        self.bar: Progress | None = None
        self.task = None
        self.stopping: str | None = None

    def __enter__(self) -> _Display:
        return self

    def __exit__(self, *_: object) -> None:
        self._stop_status()
        if self.bar is not None:
            self.bar.stop()

    def _spin(self, text: str) -> None:
        self._stop_status()
        self.status = err.status(text)
        self.status.start()

    def _stop_status(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def building(self, kind: str, role: str, game: str) -> None:
        self._spin(f"building {kind} rows for {role} from {game} logs…")

    def built(self) -> None:
        self._stop_status()

    def warn(self, text: str) -> None:
        err.print(text)

    def screening(self, tasks: int) -> None:
        self._spin(f"screening {tasks} tasks…")
        self.stopping = "interrupted: the screen's run is marked interrupted"

    def screened(self, screen: Screened) -> None:
        self._stop_status()
        self.stopping = None
        err.print(screen.describe())

    def training(self, kind: str, role: str) -> None:
        self.bar = progress_display(TextColumn(f"[bold]train {kind} {role}[/]"), BarColumn(), MofNCompleteColumn(),
                                    TimeElapsedColumn(), TimeRemainingColumn(), console=err)
        self.bar.start()
        self.task = self.bar.add_task("train", total=None)
        self.stopping = "interrupted: the training job is marked failed"

    def step(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=total)

    def say(self, text: str) -> None:
        err.print(f"[dim]{text}[/]", highlight=False)

    def gating(self, candidate: str, sets: dict[str, int]) -> None:
        sizes = " and ".join(f"{tasks} {name}" for name, tasks in sets.items())
        self._spin(f"evaluating {candidate} against the active {self.role} on {sizes} tasks…")
        self.stopping = (f"interrupted while deploying {candidate}: its unfinished gate runs are marked interrupted; "
                         "`sparring adapters list` shows its status")


@contextmanager
def _exit_when_stopped(display: _Display) -> Iterator[None]:
    """``exit_when_stopped`` with what the interrupted phase of ``display`` left marked; an
    interrupt between phases is raised as it is."""
    try:
        yield
    except KeyboardInterrupt:
        if display.stopping is None:
            raise
        with exit_when_stopped(display.stopping):
            raise
