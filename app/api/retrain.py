"""Retrain: round after round, play, build datasets, train each role, gate and deploy, with a
before/after report; an external game's rounds are played by the user's scripts."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.api.cluster import ray_cluster
from app.api.deploy import SCRIPT_HELP
from app.api.errors import InputError, RunError
from app.api.progress import PhaseProgress, Silent
from app.api.store import open_for_work, settings
from graphs.registry import game_registry

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.gateway.rounds import Scripts
    from app.ray_workers import Cluster
    from app.settings import Settings
    from evaluation.evaluator import EvaluationResult
    from graphs.context import GameOptions
    from graphs.contract import GameSpec
    from graphs.tasks.base import Task
    from training.config_file import RetrainFile
    from training.loop import RetrainConfig, RoundOutcome, RoundsOutcome

OPTION_DEFAULTS: dict[str, Any] = {"turns": 2}
"""game options the rounds, gates and report play with unless given (for the games that have them)"""
DEFAULTS: dict[str, Any] = {
    "trainer": "sft", "every_episodes": 64, "samples": 2, "practice": 512, "practice_samples": 2, "margin": 0.0,
    "min_rows": 16, "concurrency": 256, "judge_max_rows": 140, "epochs": 2.0, "eval_tasks": 200, "temperature": 0.3,
    "max_new_tokens": 96, "report": True,
}
"""What an argument left as None stands for when the config file does not give it either. The
other arguments left as None are chosen for the game (``retrain``)."""
FILE_KEYS = ("roles", "trainer", "every_episodes", "every_minutes", "samples", "tasks", "practice", "practice_samples",
             "practice_tasks", "margin", "min_rows", "concurrency", "judge_rows", "judge_max_rows", "refinements",
             "first_repairs", "answer_lines")
"""the arguments a config file may give too (each a ``RetrainConfig`` field)"""
TRAIN_FLAGS = {"learning_rate": "learning_rate", "epochs": "num_train_epochs", "max_steps": "max_steps",
               "max_seconds": "max_seconds"}
"""argument -> the trainer setting it gives (over the file's ``train`` mapping)"""
REGISTERED_ONLY = ("every_episodes", "every_minutes", "samples", "tasks", "practice", "practice_samples",
                   "practice_tasks", "eval_tasks", "report_tasks", "guard", "judge_rows", "judge_max_rows",
                   "refinements", "first_repairs", "answer_lines", "temperature", "max_new_tokens", "concurrency",
                   "seat", "report", "ray")
"""the options that play a registered game's own tasks and seats (refused for an external game), as named on
the command line"""
TRAINING_SAMPLE = 2000
"""Training tasks whose templates are checked against the evaluation sets' before a run (a file: all)."""
LEARNING_CURVE = "learning-curve.png"
"""beside the store: next to a SQLite file (store.db -> store-learning-curve.png), else in the data directory"""
INTERRUPTED = ("interrupted: every committed episode, dataset and adapter is kept; the round's running episodes "
               "and training job are marked failed")
"""what Ctrl-C leaves (the command says it)"""


RetrainProgress = PhaseProgress
"""loading, loaded, say, phase (``app.api.progress``)"""


@dataclass(frozen=True)
class RetrainResult:
    """The rounds a `retrain` ran and its before/after report."""

    game: str
    rounds: list[RoundOutcome]
    """each round's episodes, time, and each role's outcome (promoted, rejected, skipped or failed)"""
    figures: dict[str, dict[str, EvaluationResult]]
    """stage ("before", "round 1"...) -> report set name -> its evaluation; empty without a report"""
    sets: dict[str, list[Task]]
    """the report's task sets, by name (empty without a report)"""
    report_metrics: tuple[str, ...] = ()
    """the metrics the game reports first (empty: every metric measured)"""
    title: str = ""
    """the report's title: game, set sizes, decoding and game options"""
    learning_curve: Path | None = None
    """where the learning curves of the report belong (beside the store); None without a report"""


@dataclass(frozen=True)
class _Plan:
    """What the rounds of a registered game play, checked before anything is."""

    options: GameOptions
    gate_sets: dict[str, list[Task]]
    report_sets: dict[str, list[Task]]
    seats: dict[str, str]


def retrain(
    game: str = "math-reflection",
    *,
    rounds: int = 1,
    roles: Sequence[str] | str | None = None,
    trainer: str | None = None,
    every_episodes: int | None = None,
    every_minutes: float | None = None,
    samples: int | None = None,
    tasks: str | None = None,
    practice: int | None = None,
    practice_samples: int | None = None,
    practice_tasks: str | None = None,
    eval_tasks: int | None = None,
    report_tasks: int | None = None,
    guards: Sequence[str] = (),
    margin: float | None = None,
    min_rows: int | None = None,
    judge_rows: str | None = None,
    judge_max_rows: int | None = None,
    refinements: bool | None = None,
    first_repairs: bool | None = None,
    answer_lines: bool | None = None,
    options: Mapping[str, Any] | None = None,
    temperature: float | None = None,
    max_new_tokens: int | None = None,
    concurrency: int | None = None,
    seats: Mapping[str, str] | Sequence[str] | None = None,
    learning_rate: float | None = None,
    epochs: float | None = None,
    max_steps: int | None = None,
    max_seconds: float | None = None,
    report: bool | None = None,
    config_file: str | Path | None = None,
    play_script: str | None = None,
    eval_script: str | None = None,
    metric: str = "reward",
    ray: str | None = None,
    database_url: str | None = None,
    progress: RetrainProgress | None = None,
) -> RetrainResult:
    """Run ``rounds`` retrain rounds of ``game``: play new training tasks with the active adapters,
    train a candidate adapter per role on what is new, gate it on the held-out sets (and
    ``guards``), promote it if it does no worse; with ``report``, every report set measured
    before the first round and after each. The arguments are `sparring retrain`'s options.

    An argument left as None was not given: the ``config_file``'s value applies (YAML, as
    `retrain --config` reads it: each round's settings, ``train:`` trainer settings), else
    ``DEFAULTS``, else the game's choice: ``roles`` its learner seats, ``tasks`` its own source,
    ``practice_tasks`` its practice source, ``judge_rows`` truth for sft on a game that declares
    truth verdicts, ``refinements``/``first_repairs``/``answer_lines`` on for sft on a game that
    declares them. ``roles`` may be comma-separated (as --roles gives them); ``seats`` and
    ``options`` as ``evaluate`` takes them.

    A game the registry does not know is an external one: each round, ``play_script`` plays
    once per role and ``eval_script`` gates each candidate (``app.gateway.rounds``); options
    that play a registered game's tasks and seats are refused for it. ``ray``: the rounds'
    episodes and evaluations are played on the Ray cluster at that address (``app.ray_rounds``;
    training stays here). Bad input: InputError before anything is played or written. Ctrl-C:
    KeyboardInterrupt once the round's running episodes and training job are marked failed;
    what was committed is kept.
    """
    given = {"roles": _role_names(roles), "trainer": trainer, "every_episodes": every_episodes,
             "every_minutes": every_minutes, "samples": samples, "tasks": tasks, "practice": practice,
             "practice_samples": practice_samples, "practice_tasks": practice_tasks, "margin": margin,
             "min_rows": min_rows, "concurrency": concurrency, "judge_rows": judge_rows,
             "judge_max_rows": judge_max_rows, "refinements": refinements, "first_repairs": first_repairs,
             "answer_lines": answer_lines}
    flags = {"learning_rate": learning_rate, "epochs": epochs, "max_steps": max_steps, "max_seconds": max_seconds}
    progress = progress or Silent()
    if game not in game_registry():  # an external game, played through the gateway
        registered_only = {**given, "eval_tasks": eval_tasks, "report_tasks": report_tasks, "guard": guards or None,
                           "temperature": temperature, "max_new_tokens": max_new_tokens, "seat": seats or None,
                           "report": report, "ray": ray}
        return _retrain_external(game, given, flags, registered_only, rounds=rounds, config_file=config_file,
                                 play_script=play_script, eval_script=eval_script, metric=metric,
                                 database_url=database_url, progress=progress)
    if play_script is not None or eval_script is not None or metric != "reward":
        raise InputError(f"--play-script, --eval-script and --metric play an external game; {game!r} is registered: "
                         "its rounds play its own tasks (--tasks) and its gates its held-out ones, on its own metrics")
    chosen = settings(database_url=database_url)
    merged, file_train = _with_file(config_file, given)
    source = f" (settings from {config_file} and the options)" if config_file is not None else ""
    spec, config = _config(game, merged, source)
    config = replace(config, train_options=_train_options(config.trainer, file_train, chosen, source, flags))
    plan = _plan(spec, config, chosen, options, _or_default("eval_tasks", eval_tasks), report_tasks, guards, seats)
    _check_ray(ray or chosen.ray_address, config, plan)
    _check_processes(config, chosen)
    engine = open_for_work(chosen.database_url, progress.say)
    _check_draws(engine, spec, plan.seats)
    note = _judge_note(spec, config) if merged["judge_rows"] is None else None
    reported = _or_default("report", report)
    cluster = ray_cluster(chosen, ray)
    with cluster or nullcontext():
        _check_training_task(cluster, chosen.train_processes)
        done = _rounds(engine, chosen, spec, config, plan, rounds=rounds, report=reported, note=note,
                       progress=progress, temperature=_or_default("temperature", temperature),
                       max_new_tokens=_or_default("max_new_tokens", max_new_tokens), cluster=cluster)
    return _result(spec, chosen, plan, done) if reported else RetrainResult(spec.name, done.rounds, {}, {})


def _or_default(name: str, value: Any) -> Any:
    return DEFAULTS[name] if value is None else value


def _role_names(roles: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """The roles as a tuple (a string: comma-separated); None when not given."""
    if roles is None:
        return None
    names = roles.split(",") if isinstance(roles, str) else roles
    return tuple(r.strip() for r in names if r.strip())


def _with_file(config_file: str | Path | None, given: dict[str, Any]) -> tuple[dict[str, Any], RetrainFile | None]:
    """The retrain config's fields named in ``given``: those given (not None), else the config
    file's, else ``DEFAULTS``' (None where there is none); and the file's ``train`` settings
    (unchecked: they belong to the trainer chosen here, ``_train_options`` checks them)."""
    from training.config_file import ConfigFileError, read_retrain_file
    from training.loop import RetrainConfig

    defaults = {name: DEFAULTS.get(name) for name in given}
    named = {name: value for name, value in given.items() if value is not None}
    if config_file is None:
        return {**defaults, **named}, None
    try:
        from_file = read_retrain_file(Path(config_file), RetrainConfig)
    except ConfigFileError as exc:
        raise InputError(str(exc)) from exc
    return {**defaults, **from_file.fields, **named}, from_file


def _config(game: str, merged: dict[str, Any], source: str) -> tuple[GameSpec, RetrainConfig]:
    """The game and each round's settings, with the game's choices where none was made."""
    from graphs.registry import UnknownGameError, get_game
    from training.loop import RetrainConfig, default_judge_rows

    try:
        spec = get_game(game)
        tasks = merged["tasks"] or spec.tasks.default
        config = RetrainConfig(**{
            **merged,
            "roles": merged["roles"] or tuple(spec.gate_metrics),
            "tasks": tasks,
            "practice_tasks": merged["practice_tasks"] or (spec.practice.task_spec(tasks) if spec.practice else tasks),
            "refinements": _declared_default(merged, "refinements", spec),
            "first_repairs": _declared_default(merged, "first_repairs", spec, "corrected"),
            "answer_lines": _declared_default(merged, "answer_lines", spec, "answer_line"),
            "judge_rows": merged["judge_rows"] or default_judge_rows(spec, merged["trainer"]),
        })
    except (UnknownGameError, ValueError) as exc:
        raise InputError(str(exc) + source) from exc
    return spec, config


def _declared_default(merged: dict[str, Any], name: str, spec: GameSpec, declared: str | None = None) -> bool:
    """An sft row option as chosen, else on with the sft trainer for a game that declares
    refinements (and, with ``declared``, the ``Refinements`` field the option needs)."""
    if merged[name] is not None:
        return merged[name]
    needed = spec.refinements if declared is None else getattr(spec.refinements, declared, None)
    return merged["trainer"] == "sft" and needed is not None


def _train_options(kind: str, from_file: RetrainFile | None, chosen: Settings, source: str,
                   flags: dict[str, Any]) -> dict[str, Any]:
    """The trainer settings of every round: ``DEFAULTS``' for the ``flags`` (argument -> value,
    None: not given), then the file's ``train`` mapping (checked against the ``kind`` trainer),
    then the flags given; checked as the trainer's config (ranges, combinations) now, before
    anything is played."""
    from app.api.train import with_tracker_folder
    from training.config_file import ConfigFileError
    from training.trainers.kinds import trainer_kind

    config_type = trainer_kind(kind).config_type
    try:
        in_file = from_file.train_settings(kind, config_type) if from_file is not None else {}
    except ConfigFileError as exc:
        raise InputError(str(exc)) from exc
    values = {
        **{TRAIN_FLAGS[name]: DEFAULTS[name] for name in flags if name in DEFAULTS},
        **in_file,
        **{TRAIN_FLAGS[name]: value for name, value in flags.items() if value is not None},
    }
    try:
        values = with_tracker_folder(values, chosen)
        config_type(model=chosen.model, device=chosen.device, seed=chosen.seed, **values)
    except ValueError as exc:
        raise InputError(str(exc) + source) from exc
    return values


def _plan(spec: GameSpec, config: RetrainConfig, chosen: Settings, options: Mapping[str, Any] | None,
          eval_tasks: int, report_tasks: int | None, guards: Sequence[str],
          seats: Mapping[str, str] | Sequence[str] | None) -> _Plan:
    """The game options, evaluation sets and seats, each refused (InputError) before anything runs:
    a role the game cannot train or gate, rows it cannot make, a bad task source, a wording both
    trained on and held out, a seat the game lacks."""
    from app.wiring import SeatSpecError, parse_seat_specs, seat_args
    from evaluation.task_sets import check_held_out, evaluation_sets
    from graphs.options import option_fields
    from graphs.registry import UnknownGameError
    from graphs.tasks.base import TaskSourceError
    from training.loop import sft_options

    try:
        fields = option_fields(spec.options)
        game_options = spec.make_options({**{k: v for k, v in OPTION_DEFAULTS.items() if k in fields},
                                          **(options or {})})
        for role in config.roles:
            spec.gate_metric(role)
            sft_options(config, spec, role)
        gate_sets = evaluation_sets(spec, config.tasks, eval_tasks, chosen.seed, guards)
        trained = spec.tasks.load(config.tasks, n=TRAINING_SAMPLE, seed=chosen.seed, split="train")
        if config.practice and config.practice_tasks:
            trained += spec.tasks.load(config.practice_tasks, n=TRAINING_SAMPLE, seed=chosen.seed, split="train")
        check_held_out(trained, gate_sets)
        report_sets = (evaluation_sets(spec, config.tasks, report_tasks, chosen.seed, guards) if report_tasks
                       else gate_sets)
        seat_specs = parse_seat_specs(spec, seat_args(seats), options=game_options)
    except (UnknownGameError, TaskSourceError, SeatSpecError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    return _Plan(game_options, gate_sets, report_sets, seat_specs)


def _check_ray(address: str | None, config: RetrainConfig, plan: _Plan) -> None:
    """What a round on a Ray cluster cannot do, refused before the cluster is joined."""
    from app.seat_pools.resolve import drawn_specs

    if address is None:
        return
    if config.every_minutes is not None:
        raise InputError("--every-minutes bounds a round's play by time on this machine; with --ray, the round plays "
                         "--every-episodes episodes on the cluster: leave --every-minutes out")
    if drawn := drawn_specs(plan.seats):
        raise InputError(f"--seat {', '.join(drawn)}: a pool or schedule seat is drawn on this machine each round; "
                         "with --ray, name one policy per seat")


def _check_processes(config: RetrainConfig, chosen: Settings) -> None:
    """SPARRING_TRAIN_PROCESSES above 1 with a trainer, or an optimiser step, that cannot be shared
    among them: refused before anything plays."""
    from training.jobs import processes_config
    from training.trainers.kinds import trainer_kind

    if chosen.train_processes == 1:
        return
    train_config = trainer_kind(config.trainer).config_type(model=chosen.model, **config.train_options)
    try:
        processes_config(config.trainer, chosen.train_processes, train_config)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _check_training_task(cluster: Cluster | None, processes: int) -> None:
    """A node of the cluster holds a training task of ``processes`` processes (else InputError)."""
    from app.ray_workers import RaySetupError

    if cluster is None:
        return
    try:
        cluster.training_task(processes)
    except RaySetupError as exc:
        raise InputError(str(exc)) from None


def _check_draws(engine: Engine, spec: GameSpec, seats: dict[str, str]) -> None:
    """A pool naming versions the registry lacks is refused before anything plays."""
    from app.seat_pools.resolve import check_draws
    from app.wiring import SeatSpecError

    try:
        check_draws(engine, spec, seats)
    except SeatSpecError as exc:
        raise InputError(str(exc)) from exc


def _judge_note(spec: GameSpec, config: RetrainConfig) -> str | None:
    """What the judge seat learns from, when truth verdicts were chosen for it by default."""
    judge = spec.truth_verdicts
    if config.judge_rows != "truth" or judge is None:
        return None
    return (f"{judge.judge_seat}'s rows: its reviews' verdicts from the ground truth, at most {config.judge_max_rows} "
            "a round (--judge-rows truth, the default)")


def _rounds(engine: Engine, chosen: Settings, spec: GameSpec, config: RetrainConfig, plan: _Plan, *, rounds: int,
            report: bool, temperature: float, max_new_tokens: int, note: str | None,
            progress: RetrainProgress, cluster: Cluster | None) -> RoundsOutcome:
    """Load the policies once, then ``training.loop.retrain_rounds``; the gates and the report
    play in the deciding precision (``PolicyFactory.deciding_policies``: the playing models where
    they are batch-invariant, else float32 twins). On a ``cluster``,
    its workers play every episode and evaluation (``app.ray_rounds``)."""
    from app.interrupts import run_interruptible
    from app.playing import PlayJob
    from app.ray_rounds import RayRounds
    from app.seat_pools.resolve import RoundDraws, drawn_specs, evaluation_specs
    from app.wiring import PolicyFactory
    from evaluation.task_sets import evaluators
    from graphs.policies.base import SamplingParams
    from training.deploy import LivePolicies
    from training.loop import Rounds, retrain_rounds

    sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    factory = PolicyFactory(chosen, sampling, engine)
    drawn = {seat: plan.seats[seat] for seat in drawn_specs(plan.seats)}
    on_ray = None if cluster is None else RayRounds(cluster, engine, PlayJob(
        chosen, spec.name, plan.seats, plan.options, sampling, config.concurrency, None, {"ray": cluster.address}),
        say=progress.say)
    player, player_specs = on_ray.evaluations() if on_ray else (None, None)

    async def main() -> RoundsOutcome:
        try:
            progress.loading()
            live = LivePolicies(await factory.policies(evaluation_specs(spec, plan.seats)))
            progress.loaded()
            measuring = partial(evaluators, engine, spec, seed=chosen.seed, options=plan.options,
                                concurrency=config.concurrency, say=progress.say, progress=progress.phase,
                                deciding=factory.deciding_policies(), player=player, player_specs=player_specs)
            gates = measuring(plan.gate_sets)
            # the gates' evaluators when the report plays their tasks, so each figure is measured once
            shown = (gates if plan.report_sets is plan.gate_sets else measuring(plan.report_sets)) if report else []
            if note is not None:
                progress.say(note)
            setup = Rounds(engine, spec, factory.model_backend(), live, gates, config, base_model=chosen.model,
                           device=chosen.device, store_dir=chosen.store_dir, cache_dir=chosen.cache_dir,
                           seed=chosen.seed, options=plan.options, say=progress.say, progress=progress.phase,
                           train_processes=chosen.train_processes,
                           draws=RoundDraws(factory, engine, spec, drawn) if drawn else None,
                           **({"elsewhere": on_ray.play, "run_job": on_ray.run_job} if on_ray else {}))
            return await retrain_rounds(setup, rounds=rounds, report=shown)
        finally:
            await factory.aclose()

    return run_interruptible(main())


def _result(spec: GameSpec, chosen: Settings, plan: _Plan, done: RoundsOutcome) -> RetrainResult:
    """The rounds with their report: its sets, title and learning curves' place."""
    from evaluation.report import figure_path
    from graphs.options import describe

    sizes = ", ".join(f"{len(t)} {name}" for name, t in plan.report_sets.items())
    title = ", ".join([f"{spec.name}: {sizes} tasks", "greedy", *describe(plan.options)])
    return RetrainResult(spec.name, done.rounds, done.figures, plan.report_sets, tuple(spec.report_metrics), title,
                         figure_path(chosen.database_url, chosen.data_dir, LEARNING_CURVE))


def _retrain_external(game: str, given: dict[str, Any], flags: dict[str, Any], registered_only: dict[str, Any], *,
                      rounds: int, config_file: str | Path | None, play_script: str | None, eval_script: str | None,
                      metric: str, database_url: str | None, progress: RetrainProgress) -> RetrainResult:
    """Rounds of an external game, played by the scripts (``app.gateway.rounds``)."""
    from app.gateway.rounds import Scripts
    from training.loop import RetrainConfig

    if play_script is None or eval_script is None:
        raise InputError(f"game {game!r} is not registered (`sparring games` lists those that are): its rounds are "
                         "played by your scripts; give --play-script (plays training episodes) and --eval-script "
                         f"(gates each candidate). {SCRIPT_HELP}")
    if named := [f"--{name.replace('_', '-')}" for name in REGISTERED_ONLY if registered_only[name] is not None]:
        raise InputError(f"{', '.join(named)}: game {game!r} is external (not registered), and these options play a "
                         f"registered game's own tasks and seats; your scripts play an external game's. "
                         f"{SCRIPT_HELP}")
    chosen = settings(database_url=database_url)
    merged, file_train = _with_file(config_file, {k: given[k] for k in ("roles", "trainer", "margin", "min_rows")})
    source = f" (settings from {config_file} and the options)" if config_file is not None else ""
    if not merged["roles"]:
        raise InputError(f"game {game!r} is external: name the roles to train with --roles (the seats its calls "
                         f"logged, `sparring episodes list --game {game}` shows them)")
    try:
        config = RetrainConfig(**{k: merged[k] for k in ("roles", "trainer", "margin", "min_rows")})
    except ValueError as exc:
        raise InputError(str(exc) + source) from exc
    config = replace(config, train_options=_train_options(config.trainer, file_train, chosen, source, flags))
    engine = open_for_work(chosen.database_url, progress.say)
    outcomes = _external_rounds(engine, chosen, game, config, Scripts(play_script, eval_script, metric), rounds,
                                progress)
    return RetrainResult(game, outcomes, {}, {})


def _external_rounds(engine: Engine, chosen: Settings, game: str, config: RetrainConfig, scripts: Scripts, rounds: int,
                     progress: RetrainProgress) -> list[RoundOutcome]:
    """``rounds`` rounds of ``app.gateway.rounds.external_round``, models loaded once for all;
    RunError when a script stops one."""
    from app.gateway.rounds import external_round
    from app.gateway.scripts import ScriptError
    from app.wiring import PolicyFactory
    from graphs.policies.base import SamplingParams

    playing = PolicyFactory(chosen, SamplingParams(), engine)  # the gateway takes each request's sampling
    deciding = PolicyFactory(chosen, SamplingParams(), engine, deciding=True)
    outcomes: list[RoundOutcome] = []
    try:
        for index in range(1, rounds + 1):
            outcomes.append(external_round(engine, playing, deciding, game, config, scripts, round_index=index,
                                           say=progress.say))
    except ScriptError as exc:
        raise RunError(f"retrain round {len(outcomes) + 1} stopped: {exc}") from exc
    finally:
        asyncio.run(playing.aclose())
        asyncio.run(deciding.aclose())
    return outcomes
