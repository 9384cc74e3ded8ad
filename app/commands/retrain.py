"""`sparring retrain`: the whole loop, round after round, with a before/after report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.api.errors import InputError, RunError
from app.api.retrain import DEFAULTS, INTERRUPTED, OPTION_DEFAULTS
from app.api.retrain import retrain as run_retrain
from app.commands.common import ConcurrencyOption, DbOption, FormatOption, RayOption, err, fail, out
from app.commands.game_options import NONE_GIVEN, GameOptionValues, with_game_options
from app.interrupts import exit_when_stopped
from app.output import Format, emit
from app.progress import PhaseDisplay, phase_columns
from app.progress import progress as progress_display
from app.wiring import SEAT_SPEC_HELP

if TYPE_CHECKING:
    from collections.abc import Sequence

    from evaluation.evaluator import EvaluationResult
    from graphs.tasks.base import Task


@with_game_options(**OPTION_DEFAULTS)
def retrain(
    ctx: typer.Context,
    game: Annotated[str, typer.Option(help="Game played and trained on.")] = "math-reflection",
    roles: Annotated[str | None, typer.Option(
        help="Comma-separated learner roles, one adapter each (default: every learner seat of the game).",
        show_default=False)] = None,
    trainer: Annotated[str, typer.Option(help="sft (rejection sampling), dpo, kto or ppo.")] = DEFAULTS["trainer"],
    every_episodes: Annotated[int, typer.Option(
        min=1, help="New training episodes per round.")] = DEFAULTS["every_episodes"],
    every_minutes: Annotated[float | None, typer.Option(help="Also end a round's play after T minutes.")] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds to run.")] = 1,
    once: Annotated[bool, typer.Option(help="One round, then exit (for cron).")] = False,
    samples: Annotated[int, typer.Option(
        min=1, help="Episodes per task (siblings for group rows and pairs).")] = DEFAULTS["samples"],
    tasks: Annotated[
        str | None, typer.Option(help="Task source (train split to play, heldout split to gate; default: the game's "
                                      "own, `sparring games` lists them).", show_default=False)
    ] = None,
    practice: Annotated[int, typer.Option(
        min=0, help="Solo practice episodes of the game's practising seat per round (one model answer each).")
    ] = DEFAULTS["practice"],
    practice_samples: Annotated[int, typer.Option(
        min=1, help="Practice attempts per task (2: tasks answered both right and wrong, the refinement rows' "
                    "material; 1: every right answer is a distinct problem).")] = DEFAULTS["practice_samples"],
    practice_tasks: Annotated[str | None, typer.Option(
        help="Task source of practice (default: --tasks; for the arithmetic generator its level 1, one "
             "operation of each kind, where a small model gets enough right to learn from).")] = None,
    eval_tasks: Annotated[int, typer.Option(
        min=1, help="Tasks of each evaluation set a gate plays (the arithmetic generator: its unseen wordings, "
                    "the deciding set, and held-out problems in the training wordings).")] = DEFAULTS["eval_tasks"],
    report_tasks: Annotated[
        int | None, typer.Option(min=1, help="Tasks of each set of the before/after report (default: the gate's).")
    ] = None,
    guard: Annotated[list[str] | None, typer.Option(
        "--guard", help="A further task source every gate and the report play (e.g. 'arithmetic:3-4' or "
                        "gsm8k_test.jsonl), repeatable: a candidate worse beyond noise on any family of any "
                        "set is refused.", show_default=False)] = None,
    margin: Annotated[float, typer.Option(
        min=0.0, help="Gate tolerance against the active version.")] = DEFAULTS["margin"],
    min_rows: Annotated[int, typer.Option(
        min=1, help="A role with fewer new rows is not trained this round (the rows wait for the next).")
    ] = DEFAULTS["min_rows"],
    judge_rows: Annotated[str | None, typer.Option(
        help="sft rows of the game's judge-like seat (math-reflection's critic): 'own', its own right verdicts, "
             "balanced across labels; 'truth', reviews of the actor's answers checked against the ground truth "
             "(practice included) with the verdict the truth calls for, balanced at each difficulty (default: "
             "truth, for a game that declares truth verdicts and the sft trainer; own otherwise).",
        show_default=False)] = None,
    judge_max_rows: Annotated[int, typer.Option(
        min=2, help="--judge-rows truth: the most rows a round trains the judge seat on (a seeded, balanced "
                    "choice).")] = DEFAULTS["judge_max_rows"],
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
    ] = DEFAULTS["temperature"],
    max_new_tokens: Annotated[int, typer.Option(
        min=1, help="Most tokens per model turn.")] = DEFAULTS["max_new_tokens"],
    concurrency: ConcurrencyOption = DEFAULTS["concurrency"],
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", help=SEAT_SPEC_HELP)] = None,
    learning_rate: Annotated[float | None, typer.Option(help="Trainer learning rate (default: the trainer's).")] = None,
    epochs: Annotated[float | None, typer.Option(
        help="Trainer epochs per round.")] = DEFAULTS["epochs"],
    max_steps: Annotated[int | None, typer.Option(help="Trainer steps per round (overrides epochs).")] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Training time budget per role and round.")] = None,
    report: Annotated[bool, typer.Option(
        help="Evaluate before the first round and after each round.")] = DEFAULTS["report"],
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
    ray: RayOption = None,
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
    play the in-process model so that no answer depends on what shares its batch
    (SPARRING_EVAL_DTYPE: float32, or with auto batch-invariant bfloat16 on a CPU where
    bfloat16 is measured faster). Measured runs of the main job, with their machines and times:
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
      than from the truth about at most --judge-max-rows 140 checked actor answers a round: a main
      job usually has too few of them to train it; quicker)
    * `sparring retrain --practice-samples 1 --no-refinements`   (one attempt at each of 512
      problems, first answers only: quicker training, and no lesson for the refinement turn)
    * `sparring retrain --config retrain.yaml --rounds 3`, with retrain.yaml holding for instance
      `trainer: dpo`, `roles: [critic]`, `min_rows: 32` and `train: {learning_rate: 5e-5,
      loss_type: ipo, lora: {r: 16}}` (an option given here, e.g. `--min-rows 8`, overrides it)
    * `sparring retrain --rounds 3 --ray 10.0.0.5:6379 --db postgresql+psycopg://me@10.0.0.5/sparring`
      (every round's episodes, evaluations and training jobs run on a Ray cluster; with
      SPARRING_TRAIN_PROCESSES=4 and SPARRING_DEVICE=cuda, each job trains on 4 GPUs of a node)
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
    given = _when_given(
        ctx, roles=roles, trainer=trainer, every_episodes=every_episodes, every_minutes=every_minutes,
        samples=samples, tasks=tasks, practice=practice, practice_samples=practice_samples,
        practice_tasks=practice_tasks, eval_tasks=eval_tasks, report_tasks=report_tasks, margin=margin,
        min_rows=min_rows, judge_rows=judge_rows, judge_max_rows=judge_max_rows, refinements=refinements,
        first_repairs=first_repairs, answer_lines=answer_lines, temperature=temperature,
        max_new_tokens=max_new_tokens, concurrency=concurrency, learning_rate=learning_rate, epochs=epochs,
        max_steps=max_steps, max_seconds=max_seconds, report=report,
    )
    try:
        display = PhaseDisplay(err, progress_display(*phase_columns(), console=err))
        with exit_when_stopped(INTERRUPTED), display:
            result = run_retrain(
                game, rounds=1 if once else rounds, guards=guard or (), seats=seat or [], options=game_options.given,
                config_file=config_file, play_script=play_script, eval_script=eval_script, metric=metric,
                ray=ray, database_url=db, progress=display, **given,
            )
    except InputError as exc:
        fail(str(exc))
    except RunError as exc:
        fail(str(exc), code=1)
    _print_rounds(result.rounds, fmt)
    if result.figures:
        _print_learning(result.figures, result.sets, result.report_metrics, fmt, result.title,
                        result.learning_curve)


def _when_given(ctx: typer.Context, **values: Any) -> dict[str, Any]:
    """Each option's value where the command line gave it, else None: the API then takes the
    --config file's value, else the default (command line > config file > defaults)."""
    return {name: value if _given(ctx, name) else None for name, value in values.items()}


def _given(ctx: typer.Context, parameter: str) -> bool:
    """Whether the command line gave option ``parameter`` (rather than its default applying)."""
    source = ctx.get_parameter_source(parameter)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


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
    else:  # a table per set, n in a column of its own: both stages fit in 80 columns
        caption = None if shown == stages else f"every round: {png}"
        changes = _family_changes(results, shown, first, sets) if family_rows else {}
        for name in sets:
            emit([{"metric": r["metric"], **_stage_cells(r, shown)} for r in rows if r["set"] == name], fmt,
                 columns=["metric", *shown, "n"], title=f"{title}: {name}", console=out, caption=caption)
            set_families = [r for r in family_rows if r["set"] == name]
            if set_families:
                emit([{"family": r["family"], **_stage_cells(r, shown),
                       "change (pts)": changes.get((name, r["family"]))} for r in set_families], fmt,
                     columns=["family", *shown, "change (pts)", "n"], title=f"{first} by task family: {name}",
                     console=out,
                     caption=f"change: {shown[-1]} minus {shown[0]}, paired by task (95% interval); "
                             f"every round: {families_png}")
    metric_panels(stages, {f"{r['metric']} ({r['set']})": [r[s] for s in stages] for r in rows}, png, title)
    if family_rows:
        metric_panels(stages, {f"{r['family']} ({r['set']})": [r[s] for s in stages] for r in family_rows},
                      families_png, f"{first} by task family: {title}", full_scale=True)
    err.print(f"learning curves (each metric per round, 95% intervals): {png}"
              + (f", by task family: {families_png}" if family_rows else ""), highlight=False)


def _stage_cells(row: dict[str, Any], shown: Sequence[str]) -> dict[str, Any]:
    """A row's figure at each shown stage (value and 95% interval) and its sample sizes: once when
    the stages share it ("200"), else in stage order ("220, 303")."""
    found = [row[s] for s in shown if row[s]]
    sizes = list(dict.fromkeys(e.n for e in found))
    return {**{s: row[s].format(with_n=False) if row[s] else None for s in shown},
            "n": ", ".join(map(str, sizes)) if len(sizes) > 1 else (sizes[0] if sizes else None)}


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
        changes.update({(name, family): c.difference.signed(with_n=False, with_unit=False)
                        for family, c in compared.items()})
    return changes
