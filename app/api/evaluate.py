"""Evaluate policy sets: greedy episodes on the task source's evaluation sets, figures with
intervals, and a second set compared paired by task."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.api.cluster import ray_cluster
from app.api.errors import InputError
from app.api.progress import PhaseProgress, Silent
from app.api.store import open_for_work, settings

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.ray_workers import Cluster
    from app.settings import Settings
    from evaluation.evaluator import EvaluationResult
    from graphs.contract import GameSpec
    from graphs.tasks.base import Task

OPTION_DEFAULTS: dict[str, Any] = {"turns": 2}
"""game options an evaluation plays with unless given (for the games that have them)"""


EvaluationProgress = PhaseProgress
"""loading, loaded, say, phase (``app.api.progress``)"""


@dataclass(frozen=True)
class EvaluatedSet:
    """One task set, played by each policy set."""

    name: str
    """the split ("unseen", "heldout", "dev"...) or the guard source"""
    tasks: list[Task]
    result: EvaluationResult
    """the first policy set's run and metrics"""
    against: EvaluationResult | None = None
    """the second policy set's, on the same tasks (``against``)"""


@dataclass(frozen=True)
class EvaluationReport:
    game: str
    seed: int
    seats: dict[str, str]
    """the first policy set, each seat's spec"""
    against: dict[str, str] | None
    sets: list[EvaluatedSet]


def evaluate(
    game: str = "math-reflection",
    *,
    seats: Mapping[str, str] | Sequence[str] | None = None,
    against: Mapping[str, str] | Sequence[str] | None = None,
    tasks: str | None = None,
    split: str | None = None,
    n: int = 200,
    guards: Sequence[str] = (),
    families: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
    max_new_tokens: int = 96,
    concurrency: int = 256,
    seed: int | None = None,
    ray: str | None = None,
    database_url: str | None = None,
    progress: EvaluationProgress | None = None,
) -> EvaluationReport:
    """Play the policy set ``seats`` greedily on ``n`` tasks of each evaluation set of ``tasks``
    (default: the game's source; the arithmetic generator: problems in unseen wordings, then
    held-out problems in the training wordings) and of each of ``guards``, and, with
    ``against`` (the seats it changes), the second set on the same tasks.

    Each set's evaluation is a run of its own, remembered under the exact policies, tasks, seed
    and options: asking again reuses it. Models play so that no answer depends on what shares
    its batch (``Settings.deciding_dtype``: float32, or batch-invariant bfloat16). ``options`` default to ``OPTION_DEFAULTS``
    where the game has the field. Bad input: InputError before anything is played.
    """
    from app.wiring import SeatSpecError, parse_seat_specs, seat_args
    from evaluation.task_sets import evaluation_sets, only_families
    from graphs.options import option_fields
    from graphs.registry import UnknownGameError, get_game
    from graphs.tasks.base import TaskSourceError

    progress = progress or Silent()
    chosen = settings(database_url=database_url, seed=seed)
    try:
        spec = get_game(game)
        fields = option_fields(spec.options)
        game_options = spec.make_options({**{k: v for k, v in OPTION_DEFAULTS.items() if k in fields},
                                          **(options or {})})
        first = parse_seat_specs(spec, seat_args(seats), options=game_options)
        second = _against(spec, seat_args(against), first, game_options) if against else None
        tasks = tasks or spec.tasks.default
        task_sets = evaluation_sets(spec, tasks, n, chosen.seed, guards, splits=None if split is None else (split,))
        if families:
            task_sets = only_families(task_sets, families)
    except (UnknownGameError, SeatSpecError, TaskSourceError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    engine = open_for_work(chosen.database_url, progress.say)
    policy_sets = [first] if second is None else [first, second]
    _check_adapters(engine, chosen, policy_sets)  # before anything is played or logged
    cluster = ray_cluster(chosen, ray)
    if cluster is None:
        results = _play(engine, chosen, spec, task_sets, game_options, policy_sets, max_new_tokens, concurrency,
                        progress)
    else:
        with cluster:
            results = _play(engine, chosen, spec, task_sets, game_options, policy_sets, max_new_tokens, concurrency,
                            progress, cluster)
    sets = [EvaluatedSet(name, task_list, results[name][0], results[name][1] if second is not None else None)
            for name, task_list in task_sets.items()]
    return EvaluationReport(spec.name, chosen.seed, first, second, sets)


def _against(game: GameSpec, specs: list[str], first: dict[str, str], options) -> dict[str, str]:
    """The second policy set: the first one with the ``against`` seats replaced."""
    from app.wiring import SeatSpecError, parse_seat_specs

    try:
        return parse_seat_specs(game, specs, defaults=first, options=options)
    except SeatSpecError as exc:  # its messages name the option --seat
        raise SeatSpecError(str(exc).replace("--seat ", "--against ", 1)) from exc


def _check_adapters(engine: Engine, chosen: Settings, sets: list[dict[str, str]]) -> None:
    """Every named adapter version exists and its folder is intact, for the configured model."""
    from app.wiring import other_base_model
    from graphs.policies.adapter_folder import AdapterFolderError
    from training.adapter_folders import verify_folder
    from training.registry import RegistryError, active_version, get_version

    for specs in sets:
        for seat, spec in specs.items():
            choice = spec.removeprefix("model").removeprefix(":")
            if (spec != "model" and not spec.startswith("model:")) or choice == "base" or other_base_model(spec):
                continue
            try:
                record = get_version(engine, choice) if choice else active_version(engine, seat)
                if record is not None:
                    verify_folder(record.path, base_model=chosen.model, status=record.status)
            except RegistryError as exc:
                raise InputError(f"--seat {seat}={spec}: {exc}. See `sparring adapters list`, or use "
                                 f"{seat}=model:base") from exc
            except AdapterFolderError as exc:
                raise InputError(f"--seat {seat}={spec}: the store cannot serve it: {exc}") from exc


def _label(specs: dict[str, str]) -> str:
    return "eval " + " ".join(f"{seat}={spec}" for seat, spec in specs.items())


def _play(engine: Engine, chosen: Settings, game: GameSpec, task_sets: dict[str, list[Task]], options,
          sets: list[dict[str, str]], max_new_tokens: int, concurrency: int, progress: EvaluationProgress,
          cluster: Cluster | None = None) -> dict[str, list[EvaluationResult]]:
    """Each task set's evaluations, one per policy set, in order; played on ``cluster`` when given."""
    from app.interrupts import run_interruptible
    from app.wiring import PolicyFactory
    from evaluation.task_sets import evaluators
    from graphs.policies.base import SamplingParams

    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    factory = PolicyFactory(chosen, sampling, engine, deciding=True)
    player = None
    if cluster is not None:
        from app.playing import PlayJob
        from app.ray_workers import evaluation_player

        player = evaluation_player(cluster, engine, PlayJob(chosen, game.name, {}, options, sampling, concurrency,
                                                            None, {"ray": cluster.address}, deciding=True))

    async def main() -> dict[str, list[EvaluationResult]]:
        try:
            progress.loading()
            try:
                policy_sets = [await factory.policies(specs) for specs in sets]
            except Exception as exc:  # nothing is logged yet: say what cannot be served
                raise InputError(f"could not set up the policies: {exc}") from exc
            progress.loaded()
            made = evaluators(engine, game, task_sets, chosen.seed, options, concurrency, say=progress.say,
                              progress=progress.phase, player=player)
            return {e.name: [await e(policies, label=f"{_label(specs)} ({e.name})", seats=specs)
                             for policies, specs in zip(policy_sets, sets, strict=True)] for e in made}
        finally:
            await factory.aclose()

    return run_interruptible(main())
