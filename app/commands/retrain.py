"""`sparring retrain`: the whole loop, round after round, with a before/after report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from app.commands.common import (
    ConcurrencyOption,
    DbOption,
    FormatOption,
    clean_up_stale_work,
    err,
    fail,
    out,
    settings_or_exit,
    store_or_exit,
)
from app.commands.game_options import NONE_GIVEN, GameOptionValues, with_game_options
from app.interrupts import exit_when_stopped, run_interruptible
from app.output import Format, emit
from app.progress import progress as progress_display
from app.wiring import SEAT_SPEC_HELP, PolicyFactory, SeatSpecError, parse_seat_specs

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.progress import Progress

    from app.settings import Settings
    from evaluation.evaluator import EvaluationResult
    from graphs.games import GameSpec
    from graphs.tasks.base import Task
    from training.config_file import RetrainFile

TRAINING_SAMPLE = 2000
"""Training tasks whose templates are checked against the evaluation sets' before a run (a file: all)."""
LEARNING_CURVE = "learning-curve.png"
"""beside the store: next to a SQLite file (store.db -> store-learning-curve.png), else in the data directory"""


class PhaseBars:
    """One progress bar per phase of the loop (play, train a role, each evaluation), added
    when the phase first reports."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._bars: dict[str, Any] = {}

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        bar = self._bars.get(phase)
        if bar is None:
            bar = self._bars[phase] = self._progress.add_task(phase, total=total)
        self._progress.update(bar, completed=done, total=total)


@with_game_options(turns=2)
def retrain(
    ctx: typer.Context,
    game: Annotated[str, typer.Option(help="Game played and trained on.")] = "math-reflection",
    roles: Annotated[str | None, typer.Option(
        help="Comma-separated learner roles, one adapter each (default: every learner seat of the game).",
        show_default=False)] = None,
    trainer: Annotated[str, typer.Option(help="sft (rejection sampling), dpo, kto or ppo.")] = "sft",
    every_episodes: Annotated[int, typer.Option(min=1, help="New training episodes per round.")] = 64,
    every_minutes: Annotated[float | None, typer.Option(help="Also end a round's play after T minutes.")] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds to run.")] = 1,
    once: Annotated[bool, typer.Option(help="One round, then exit (for cron).")] = False,
    samples: Annotated[int, typer.Option(min=1, help="Episodes per task (siblings for group rows and pairs).")] = 2,
    tasks: Annotated[
        str | None, typer.Option(help="Task source (train split to play, heldout split to gate; default: the game's "
                                      "own, `sparring games` lists them).", show_default=False)
    ] = None,
    practice: Annotated[int, typer.Option(
        min=0, help="Solo practice episodes of the game's practising seat per round (one model answer each).")] = 512,
    practice_samples: Annotated[int, typer.Option(
        min=1, help="Practice attempts per task (2: tasks answered both right and wrong, the refinement rows' "
                    "material; 1: every right answer is a distinct problem).")] = 2,
    practice_tasks: Annotated[str | None, typer.Option(
        help="Task source of practice (default: --tasks; for the arithmetic generator its level 1, one "
             "operation of each kind, where a small model gets enough right to learn from).")] = None,
    eval_tasks: Annotated[int, typer.Option(
        min=1, help="Tasks of each evaluation set a gate plays (the arithmetic generator: its unseen wordings, "
                    "the deciding set, and held-out problems in the training wordings).")] = 200,
    report_tasks: Annotated[
        int | None, typer.Option(min=1, help="Tasks of each set of the before/after report (default: the gate's).")
    ] = None,
    guard: Annotated[list[str] | None, typer.Option(
        "--guard", help="A further task source every gate and the report play (e.g. 'arithmetic:3-4' or "
                        "gsm8k_test.jsonl), repeatable: a candidate worse beyond noise on any family of any "
                        "set is refused.", show_default=False)] = None,
    margin: Annotated[float, typer.Option(min=0.0, help="Gate tolerance against the active version.")] = 0.0,
    min_rows: Annotated[int, typer.Option(
        min=1, help="A role with fewer new rows is not trained this round (the rows wait for the next).")] = 16,
    judge_rows: Annotated[str | None, typer.Option(
        help="sft rows of the game's judge-like seat (math-reflection's critic): 'own', its own right verdicts, "
             "balanced across labels; 'truth', reviews of the actor's answers checked against the ground truth "
             "(practice included) with the verdict the truth calls for, balanced at each difficulty (default: "
             "truth, for a game that declares truth verdicts and the sft trainer; own otherwise).",
        show_default=False)] = None,
    judge_max_rows: Annotated[int, typer.Option(
        min=2, help="--judge-rows truth: the most rows a round trains the judge seat on (a seeded, balanced "
                    "choice).")] = 70,
    refinements: Annotated[bool | None, typer.Option(
        "--refinements/--no-refinements",
        help="The actor's sft rows also teach its refinement turn: for each task its first answers got both right "
             "and wrong, the prompt after a bare rejection of a wrong answer and of a right one, each answered with "
             "a right answer, and each wrong answer the game can correct, answered with the correction "
             "(default: on with the sft trainer, for a game that declares refinements).",
        show_default=False)] = None,
    first_repairs: Annotated[bool | None, typer.Option(
        "--first-repairs/--no-first-repairs",
        help="The actor's sft rows also answer the question of each wrong first answer the game corrects to the "
             "right one (math-reflection: its written arithmetic recomputed) with the correction, where no first "
             "answer to that question was right (default: on with the sft trainer, for a game that declares "
             "corrections).", show_default=False)] = None,
    answer_lines: Annotated[bool | None, typer.Option(
        "--answer-lines/--no-answer-lines",
        help="The actor's right answers in its sft rows end with the final line its prompt asks for "
             "(math-reflection: 'Answer: <the ground truth>' added where the answer's last line is not one; "
             "default: on with the sft trainer, for a game that declares that line).",
        show_default=False)] = None,
    game_options: GameOptionValues = NONE_GIVEN,
    temperature: Annotated[
        float,
        typer.Option(min=0.0, help="Temperature of training episodes (lower: more right answers to learn from, "
                                   "fewer distinct ones)."),
    ] = 0.3,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens per model turn.")] = 96,
    concurrency: ConcurrencyOption = 256,
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", help=SEAT_SPEC_HELP)] = None,
    learning_rate: Annotated[float | None, typer.Option(help="Trainer learning rate (default: the trainer's).")] = None,
    epochs: Annotated[float | None, typer.Option(
        help="Trainer epochs per round.")] = 2.0,
    max_steps: Annotated[int | None, typer.Option(help="Trainer steps per round (overrides epochs).")] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Training time budget per role and round.")] = None,
    report: Annotated[bool, typer.Option(help="Evaluate before the first round and after each round.")] = True,
    config_file: Annotated[
        Path | None,
        typer.Option("--config", help="YAML file of each round's settings (trainer, roles, every_episodes, "
                     "samples, min_rows... as `min_rows: 32`, `roles: [critic]`) and `train:` trainer settings as "
                     "in `train --config`. Options given here override it.", show_default=False),
    ] = None,
    play_script: Annotated[str | None, typer.Option(
        help="External game: the command line of your agent that plays training episodes, run once per role "
             "each round through a gateway started here (SPARRING_GATEWAY_URL, SPARRING_GATEWAY_MODEL, "
             "SPARRING_GATEWAY_ROLE, SPARRING_GATEWAY_SPLIT in its environment).", show_default=False)] = None,
    eval_script: Annotated[str | None, typer.Option(
        help="External game: the command line of your evaluation, which gates each candidate as `sparring "
             "deploy --eval-script` does.", show_default=False)] = None,
    metric: Annotated[str, typer.Option(
        help="External game: what the gates compare, per task: 'reward', each episode's headline reward, or "
             "the name of a reward the role's seat gets.")] = "reward",
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Play, build datasets since the last watermark, train each role, gate, deploy; repeat.

    Each round plays new training tasks with the active adapters (sampled), trains one
    candidate adapter per role on what is new, and promotes it only if it does not do worse
    on the held-out tasks (greedy, same seeds every round). A role whose step fails (no new
    rows, a crashed trainer, a rejected candidate) is recorded and the loop goes on with the
    active adapters. Ctrl-C keeps everything committed. The defaults are the main job: the
    actor first practises alone (--practice, two attempts a task), then full episodes are
    played, and its rows also teach its refinement turn (--refinements), each right answer ending
    with the answer line its prompt asks for (--answer-lines), and each wrong first answer its
    corrected arithmetic makes right answers its question too (--first-repairs). Gates and the report
    play each evaluation set of --tasks (the arithmetic generator: wordings training never sees,
    which decide, and held-out problems in the training wordings) and any --guard set; a
    candidate worse beyond noise on any task family of any set is refused. Gates and the report
    play the in-process model in float32 (SPARRING_EVAL_DTYPE), so that no answer depends on
    what shares its batch. Measured runs of the main job, with their machines and times:
    docs/results/.

    Examples:

    * `sparring retrain`   (one round: play, train actor and critic, gate, deploy, report; the
      critic learns from the truth about the actor's answers, --judge-rows truth)
    * `sparring retrain --rounds 3`   (three rounds, gates and report on 200 held-out tasks)
    * `sparring retrain --eval-tasks 64 --practice 128`   (a quicker, noisier round)
    * `sparring retrain --guard gsm8k_test.jsonl`   (the gates also refuse a candidate that got
      worse on a family of GSM8K's problems; the report shows them too)
    * `sparring retrain --once --trainer dpo --roles critic`   (from cron)
    * `sparring retrain --judge-rows own`   (the critic learns from its own right verdicts rather
      than from the truth about at most --judge-max-rows 70 checked actor answers a round: a main
      job usually has too few of them to train it; quicker)
    * `sparring retrain --practice-samples 1 --no-refinements`   (one attempt at each of 512
      problems, first answers only: quicker training, and no lesson for the refinement turn)
    * `sparring retrain --config retrain.yaml --rounds 3`, with retrain.yaml holding for instance
      `trainer: dpo`, `roles: [critic]`, `min_rows: 32` and `train: {learning_rate: 5e-5,
      loss_type: ipo, lora: {r: 16}}` (an option given here, e.g. `--min-rows 8`, overrides it)
    * `sparring retrain --game debate --roles debater_a --seat debater_b=pool:debater_a/uniform --rounds 3`
      (self-play against its own history: the pool is re-read every round; gates and the
      report play debater_b's default policy, the base model)

    An external game (played through `sparring gateway`, not registered) is played by your
    scripts: each round, --play-script plays once per role (its episodes are training data),
    then each role is trained on what is new and its candidate gated by --eval-script, as
    `sparring deploy --eval-script` gates it. Manual: docs/gateway.md.

    * `sparring retrain --game review --roles solver --trainer dpo --play-script "python
      examples/langgraph_review.py --episodes 32" --eval-script "python
      examples/langgraph_review.py"`
    """
    from app.commands.external_game import registered

    if not registered(game):
        _retrain_external(ctx, game, config_file, roles=roles, trainer=trainer, margin=margin, min_rows=min_rows,
                          rounds=1 if once else rounds, play_script=play_script, eval_script=eval_script,
                          metric=metric, db=db, fmt=fmt, flags={
                              "learning_rate": ("learning_rate", learning_rate), "num_train_epochs": ("epochs", epochs),
                              "max_steps": ("max_steps", max_steps), "max_seconds": ("max_seconds", max_seconds)})
        return
    if play_script is not None or eval_script is not None or metric != "reward":
        fail(f"--play-script, --eval-script and --metric play an external game; {game!r} is registered: its rounds "
             "play its own tasks (--tasks) and its gates its held-out ones, on its own metrics")
    from app.seat_draws import RoundDraws, check_draws, drawn_specs, evaluation_specs
    from evaluation.task_sets import check_held_out, evaluation_sets, evaluators
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.base import SamplingParams
    from graphs.tasks.base import TaskSourceError
    from training.deploy import LivePolicies
    from training.loop import RetrainConfig, default_judge_rows, retrain_round, sft_options

    settings = settings_or_exit(database_url=db)
    total_rounds = 1 if once else rounds
    chosen, file_train = _with_file(ctx, config_file, {
        "roles": tuple(r.strip() for r in roles.split(",") if r.strip()) if roles else None, "trainer": trainer,
        "every_episodes": every_episodes, "every_minutes": every_minutes, "samples": samples, "tasks": tasks,
        "practice": practice, "practice_samples": practice_samples, "practice_tasks": practice_tasks,
        "margin": margin, "min_rows": min_rows, "concurrency": concurrency, "judge_rows": judge_rows,
        "judge_max_rows": judge_max_rows, "refinements": refinements, "first_repairs": first_repairs,
        "answer_lines": answer_lines,
    })
    source = f" (settings from {config_file} and the options)" if config_file is not None else ""
    try:
        spec = get_game(game)
        tasks = chosen["tasks"] or spec.tasks.default
        config = RetrainConfig(**{
            **chosen,
            "roles": chosen["roles"] or tuple(spec.gate_metrics),
            "tasks": tasks,
            "practice_tasks": chosen["practice_tasks"] or (spec.practice.task_spec(tasks) if spec.practice else tasks),
            "refinements": _declared_default(chosen, "refinements", spec),
            "first_repairs": _declared_default(chosen, "first_repairs", spec, "corrected"),
            "answer_lines": _declared_default(chosen, "answer_lines", spec, "answer_line"),
            "judge_rows": chosen["judge_rows"] or default_judge_rows(spec, chosen["trainer"]),
        })
    except (UnknownGameError, ValueError) as exc:
        fail(str(exc) + source)
    config = replace(config, train_options=_train_options(ctx, config.trainer, file_train, settings, source, {
        "learning_rate": ("learning_rate", learning_rate), "num_train_epochs": ("epochs", epochs),
        "max_steps": ("max_steps", max_steps), "max_seconds": ("max_seconds", max_seconds),
    }))
    concurrency = config.concurrency  # the file's, when the command line gave none: the evaluations use it too
    try:
        options = game_options.make(spec)
        for role in config.roles:
            spec.gate_metric(role)  # a role the game cannot train or gate is refused before anything runs
            sft_options(config, spec, role)  # as are rows the game cannot make (--judge-rows truth)
        gate_sets = evaluation_sets(spec, tasks, eval_tasks, settings.seed, guard or ())
        # a bad practice source fails before anything is played, as does a wording both trained and held out
        trained = spec.tasks.load(tasks, n=TRAINING_SAMPLE, seed=settings.seed, split="train")
        if config.practice and config.practice_tasks:
            trained += spec.tasks.load(config.practice_tasks, n=TRAINING_SAMPLE, seed=settings.seed, split="train")
        check_held_out(trained, gate_sets)
        report_sets = (evaluation_sets(spec, tasks, report_tasks, settings.seed, guard or ()) if report_tasks
                       else gate_sets)
        seat_specs = parse_seat_specs(spec, seat or [], options=options)
    except (UnknownGameError, TaskSourceError, SeatSpecError, ValueError) as exc:
        fail(str(exc))
    engine = store_or_exit(settings)
    clean_up_stale_work(engine)
    try:
        check_draws(engine, spec, seat_specs)
    except SeatSpecError as exc:
        fail(str(exc))
    drawn = {seat: seat_specs[seat] for seat in drawn_specs(seat_specs)}
    factory = PolicyFactory(settings, SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens), engine)
    progress = progress_display(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    )
    bars = PhaseBars(progress)

    def say(message: str) -> None:
        progress.console.print(f"[dim]{message}[/]")

    async def main():
        try:
            with err.status("loading models…"):
                live = LivePolicies(await factory.policies(evaluation_specs(spec, seat_specs)))
            deciding = factory.deciding_policies()
            evaluate, *guards = evaluators(engine, spec, gate_sets, settings.seed, options, concurrency, say=say,
                                           progress=bars, deciding=deciding)
            # the same evaluators when the report plays the gate's tasks, so each figure is measured once
            measure = [evaluate, *guards] if report_sets is gate_sets else evaluators(
                engine, spec, report_sets, settings.seed, options, concurrency, say=say, progress=bars,
                deciding=deciding)

            async def measured(label: str) -> dict[str, EvaluationResult]:
                return {e.name: await e(live(), label=f"{label}: {e.name}") for e in measure}

            figures: dict[str, dict[str, EvaluationResult]] = {}
            outcomes = []
            with progress:
                judge = spec.truth_verdicts
                if chosen["judge_rows"] is None and config.judge_rows == "truth" and judge is not None:
                    say(f"{judge.judge_seat}'s rows: its reviews' verdicts from the ground truth, at most "
                        f"{config.judge_max_rows} a round (--judge-rows truth, the default)")
                if report:
                    figures["before"] = await measured("before")
                for index in range(1, total_rounds + 1):
                    outcomes.append(await retrain_round(
                        engine, spec, factory.model_backend(), live, evaluate, config,
                        round_index=index, base_model=settings.model, device=settings.device,
                        store_dir=settings.store_dir, cache_dir=settings.cache_dir, seed=settings.seed,
                        options=options, say=say, progress=bars,
                        draws=RoundDraws(factory, engine, spec, drawn) if drawn else None, guards=guards,
                    ))
                    if report:
                        figures[f"round {index}"] = await measured(f"after round {index}")
            return outcomes, figures
        finally:
            await factory.aclose()

    with exit_when_stopped("interrupted: every committed episode, dataset and adapter is kept; the round's "
                           "running episodes and training job are marked failed"):
        outcomes, figures = run_interruptible(main())
    from evaluation.report import figure_path

    _print_rounds(outcomes, fmt)
    if figures:
        from graphs.options import describe

        sizes = ", ".join(f"{len(t)} {name}" for name, t in report_sets.items())
        title = ", ".join([f"{spec.name}: {sizes} tasks", "greedy", *describe(options)])
        _print_learning(figures, report_sets, spec.report_metrics, fmt, title,
                        figure_path(settings.database_url, settings.data_dir, LEARNING_CURVE))


REGISTERED_ONLY = ("every_episodes", "every_minutes", "samples", "tasks", "practice", "practice_samples",
                   "practice_tasks", "eval_tasks", "report_tasks", "guard", "judge_rows", "judge_max_rows",
                   "refinements", "first_repairs", "answer_lines", "temperature", "max_new_tokens", "concurrency",
                   "seat", "report")
"""retrain's options that play a registered game's own tasks and seats"""


def _retrain_external(ctx: typer.Context, game: str, config_file: Path | None, *, roles: str | None, trainer: str,
                      margin: float, min_rows: int, rounds: int, play_script: str | None, eval_script: str | None,
                      metric: str, db: str | None, fmt: Format, flags: dict[str, tuple[str, Any]]) -> None:
    """`sparring retrain` on an external game: ``app.gateway.rounds``."""
    from app.commands.external_game import SCRIPT_HELP, refuse_registered_options, retrain_external
    from training.loop import RetrainConfig

    if play_script is None or eval_script is None:
        fail(f"game {game!r} is not registered (`sparring games` lists those that are): its rounds are played by "
             "your scripts; give --play-script (plays training episodes) and --eval-script (gates each "
             "candidate). " + SCRIPT_HELP)
    refuse_registered_options(game, {f"--{name.replace('_', '-')}": _given(ctx, name) for name in REGISTERED_ONLY})
    settings = settings_or_exit(database_url=db)
    chosen, file_train = _with_file(ctx, config_file, {
        "roles": tuple(r.strip() for r in roles.split(",") if r.strip()) if roles else None, "trainer": trainer,
        "margin": margin, "min_rows": min_rows})
    source = f" (settings from {config_file} and the options)" if config_file is not None else ""
    if not chosen["roles"]:
        fail(f"game {game!r} is external: name the roles to train with --roles (the seats its calls logged, "
             f"`sparring episodes list --game {game}` shows them)")
    try:
        config = RetrainConfig(**{k: chosen[k] for k in ("roles", "trainer", "margin", "min_rows")})
    except ValueError as exc:
        fail(str(exc) + source)
    config = replace(config, train_options=_train_options(ctx, config.trainer, file_train, settings, source, flags))

    def say(message: str) -> None:
        err.print(f"[dim]{message}[/]", highlight=False)

    with exit_when_stopped("interrupted: every committed episode, dataset and adapter is kept; the round's "
                           "running episodes and training job are marked failed"):
        outcomes = retrain_external(game, config, play_script=play_script, eval_script=eval_script, metric=metric,
                                    rounds=rounds, settings=settings, say=say)
    _print_rounds(outcomes, fmt)


def _given(ctx: typer.Context, parameter: str) -> bool:
    """Whether the command line gave option ``parameter`` (rather than its default applying)."""
    source = ctx.get_parameter_source(parameter)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def _declared_default(chosen: dict[str, Any], name: str, spec: GameSpec, declared: str | None = None) -> bool:
    """An sft row option as chosen, else on with the sft trainer for a game that declares
    refinements (and, with ``declared``, the ``Refinements`` field the option needs)."""
    if chosen[name] is not None:
        return chosen[name]
    needed = spec.refinements if declared is None else getattr(spec.refinements, declared, None)
    return chosen["trainer"] == "sft" and needed is not None


def _with_file(ctx: typer.Context, config_file: Path | None,
               options: dict[str, Any]) -> tuple[dict[str, Any], RetrainFile | None]:
    """The retrain config's fields: ``options`` (the command's, by field name), those the command
    line did not give replaced by the --config file's; and the file's ``train`` settings (unchecked:
    they belong to the trainer chosen here, ``_train_options`` checks them)."""
    from training.config_file import ConfigFileError, read_retrain_file
    from training.loop import RetrainConfig

    if config_file is None:
        return options, None
    try:
        from_file = read_retrain_file(config_file, RetrainConfig)
    except ConfigFileError as exc:
        fail(str(exc))
    return {**options, **{k: v for k, v in from_file.fields.items() if not _given(ctx, k)}}, from_file


def _train_options(ctx: typer.Context, kind: str, from_file: RetrainFile | None, settings: Settings, source: str,
                   flags: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """The trainer settings of every round: the options' defaults, then the file's ``train``
    mapping (checked against the ``kind`` trainer), then the options given; checked as the
    trainer's config (ranges, combinations) now, before anything is played. ``flags``: trainer
    field -> (the option's parameter name, its value)."""
    from app.commands.training import with_tracker_folder
    from training.config_file import ConfigFileError
    from training.trainers.kinds import trainer_kind

    config_type = trainer_kind(kind).config_type
    try:
        in_file = from_file.train_settings(kind, config_type) if from_file is not None else {}
    except ConfigFileError as exc:
        fail(str(exc))
    values = {
        **{field: value for field, (option, value) in flags.items() if value is not None and not _given(ctx, option)},
        **in_file,
        **{field: value for field, (option, value) in flags.items() if _given(ctx, option)},
    }
    try:
        values = with_tracker_folder(values, settings)
        config_type(model=settings.model, device=settings.device, seed=settings.seed, **values)
    except ValueError as exc:
        fail(str(exc) + source)
    return values


def _print_rounds(outcomes: list[Any], fmt: Format) -> None:
    rows = [
        {"round": o.round, "episodes": o.episodes, "role": r.role, "status": r.status, "rows": r.rows,
         "candidate": r.candidate, "detail": r.detail, "seconds": round(o.seconds)}
        for o in outcomes
        for r in o.roles
    ]
    caption = "\n".join(f"round {o.round}: {o.episodes} training episodes, {round(o.seconds)} s" for o in outcomes)
    emit(rows, fmt, columns=["round", "role", "status", "rows", "candidate", "detail"], title="retrain rounds",
         caption=caption, console=out)


def _print_learning(figures: dict[str, dict[str, EvaluationResult]], sets: dict[str, list[Task]],
                    reported: Sequence[str], fmt: Format, title: str, png: Path) -> None:
    """The before/after tables and the learning curves beside the store: the game's ``reported``
    metrics (empty: every metric measured) on each evaluation set, then the first of them by task
    family, for sets of several families (json: every stage, each record a metric of one set,
    ``family`` null for the whole set)."""
    from evaluation.families import by_family
    from evaluation.plots import metric_panels

    stages = list(figures)
    results = {(stage, name): result for stage, found in figures.items() for name, result in found.items()}
    measured = list(dict.fromkeys(m for r in results.values() for m in r.metrics))
    metrics = [m for m in reported if m in measured] if reported else measured
    rows: list[dict[str, Any]] = []
    for name in sets:
        for metric in metrics:
            rows.append({"metric": metric, "set": name, "family": None,
                         **{s: results[s, name].metrics.get(metric) for s in stages}})
    first = metrics[0] if metrics else None
    family_rows: list[dict[str, Any]] = []
    for name, tasks in sets.items():
        per_stage = {s: by_family(results[s, name].per_task.get(first, {}), tasks) for s in stages}
        found_families = list(dict.fromkeys(f for found in per_stage.values() for f in found))
        for family in found_families if len(found_families) > 1 else []:  # a file of one kind: its total
            family_rows.append({"metric": first, "set": name, "family": family,
                                **{s: per_stage[s].get(family) for s in stages}})
    shown = stages if len(stages) <= 2 else [stages[0], stages[-1]]
    families_png = png.with_name(png.stem + "-families.png")
    if fmt != Format.table:
        emit([{**r, **{s: r[s].to_dict() if r[s] else None for s in stages}} for r in rows + family_rows], fmt)
    else:
        caption = None if shown == stages else f"every round: {png}"
        emit([{"metric": r["metric"], "set": r["set"], **{s: r[s].format() if r[s] else None for s in shown}}
              for r in rows], fmt, columns=["metric", "set", *shown], title=title, console=out, caption=caption)
        if family_rows:
            changes = _family_changes(results, shown, first, sets)
            emit([{"set": r["set"], "family": r["family"], **{s: r[s].format() if r[s] else None for s in shown},
                   "change": changes.get((r["set"], r["family"]))} for r in family_rows], fmt,
                 columns=["set", "family", *shown, "change"], title=f"{first} by task family", console=out,
                 caption=f"change: {shown[-1]} minus {shown[0]}, paired by task (95% interval); "
                         f"every round: {families_png}")
    metric_panels(stages, {f"{r['metric']} ({r['set']})": [r[s] for s in stages] for r in rows}, png, title)
    if family_rows:
        metric_panels(stages, {f"{r['family']} ({r['set']})": [r[s] for s in stages] for r in family_rows},
                      families_png, f"{first} by task family: {title}", full_scale=True)
    err.print(f"learning curves (each metric per round, 95% intervals): {png}"
              + (f", by task family: {families_png}" if family_rows else ""), highlight=False)


def _family_changes(results: dict[tuple[str, str], EvaluationResult], shown: list[str], metric: str,
                    sets: dict[str, list[Task]]) -> dict[tuple[str, str], str]:
    """(set, family) -> the family's paired change of ``metric`` from the first shown stage to the
    last (empty with one stage)."""
    from evaluation.families import paired_by_family

    if len(shown) < 2:
        return {}
    changes = {}
    for name, tasks in sets.items():
        before, after = results[shown[0], name], results[shown[-1], name]
        compared = paired_by_family(after.per_task.get(metric, {}), before.per_task.get(metric, {}), tasks)
        changes.update({(name, family): c.difference.signed(with_n=False) for family, c in compared.items()})
    return changes
