"""Gate a candidate adapter against the role's active version and promote or reject it: on a
registered game's held-out tasks, or, for an external game, on the runs of the user's evaluation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from app.api.errors import InputError, RunError, one_line
from app.api.store import open_for_work, settings
from graphs.registry import game_registry

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.settings import Settings
    from app.wiring import PolicyFactory
    from training.deploy import GateResult
    from training.registry import AdapterRecord

SCRIPT_HELP = ("An external game (one played through `sparring gateway`) is played by your scripts: "
               "docs/gateway.md, 'Gate and retrain'.")


class DeployProgress(Protocol):
    """What a deploy tells as it goes (the CLI shows a spinner while the versions play)."""

    def warn(self, text: str) -> None:
        """Something the user should read: stale work marked failed."""

    def say(self, text: str) -> None:
        """How an external game's evaluation goes: the script starts for one version."""

    def gating(self, candidate: str, sets: dict[str, int]) -> None:
        """Both versions start playing the evaluation sets (name -> number of tasks, deciding set first)."""


class _Silent:
    def warn(self, text: str) -> None:
        pass

    def say(self, text: str) -> None:
        pass

    def gating(self, candidate: str, sets: dict[str, int]) -> None:
        pass


def deploy(
    role: str,
    *,
    candidate: str | None = None,
    game: str = "math-reflection",
    tasks: str | None = None,
    eval_tasks: int = 64,
    margin: float = 0.0,
    guards: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
    max_new_tokens: int = 160,
    concurrency: int = 256,
    seats: Mapping[str, str] | Sequence[str] | None = None,
    eval_script: str | None = None,
    metric: str = "reward",
    candidate_run: str | None = None,
    baseline_run: str | None = None,
    database_url: str | None = None,
    progress: DeployProgress | None = None,
) -> GateResult:
    """What `sparring deploy` does: gate ``candidate`` (default: ``role``'s newest) against the
    role's active version and promote it only if it is not worse by more than ``margin`` on the
    deciding set and no task family got worse beyond noise on any set; otherwise reject it.

    A registered game: both versions play ``eval_tasks`` tasks of each evaluation set of
    ``tasks`` (default: the game's source) and of each of ``guards``, greedily in the deciding precision, with
    the other seats of ``seats`` and the game's ``options``. An external game (played through
    `sparring gateway`): ``eval_script`` plays it once per version, or ``candidate_run`` and
    ``baseline_run`` name two runs already logged, compared paired by task on ``metric``
    (docs/gateway.md).

    Returns the gate's result (``promoted``, ``reason``, the figures). Bad input: InputError
    before anything is played. A candidate that cannot be served or gated: RunError, the
    candidate left a candidate. Ctrl-C or SIGTERM: KeyboardInterrupt once the unfinished gate
    runs are marked interrupted.
    """
    progress = progress or _Silent()
    if game not in game_registry():  # an external game, played through the gateway
        given = {"--tasks": tasks is not None, "--guard": bool(guards), "--seat": bool(seats)}
        if named := [flag for flag, was_given in given.items() if was_given]:
            raise InputError(f"{', '.join(named)}: game {game!r} is external (not registered), and these options play "
                             "a registered game's own tasks and seats; your scripts play an external game's. "
                             + SCRIPT_HELP)
        return _deploy_external(role, candidate, game, eval_script=eval_script, candidate_run=candidate_run,
                                baseline_run=baseline_run, metric=metric, margin=margin, database_url=database_url,
                                progress=progress)
    if eval_script is not None or candidate_run is not None or baseline_run is not None or metric != "reward":
        raise InputError(f"--eval-script, --candidate-run, --baseline-run and --metric gate an external game; {game!r} "
                         "is registered: its gate plays its held-out tasks (--tasks, --eval-tasks, --guard) on its own "
                         "metric")
    return _deploy_registered(role, candidate, game, tasks=tasks, eval_tasks=eval_tasks, margin=margin, guards=guards,
                              options=options, max_new_tokens=max_new_tokens, concurrency=concurrency, seats=seats,
                              database_url=database_url, progress=progress)


def _store(database_url: str | None, progress: DeployProgress) -> tuple[Settings, Engine]:
    """The settings and the store, with the stale work of killed processes marked failed."""
    chosen = settings(database_url=database_url)
    return chosen, open_for_work(chosen.database_url, progress.warn)


def _deploy_registered(role: str, candidate: str | None, game: str, *, tasks: str | None, eval_tasks: int,
                       margin: float, guards: Sequence[str], options: Mapping[str, Any] | None, max_new_tokens: int,
                       concurrency: int, seats: Mapping[str, str] | Sequence[str] | None, database_url: str | None,
                       progress: DeployProgress) -> GateResult:
    """Both versions play the game's held-out tasks and the guard sets; the gate decides."""
    from app.interrupts import run_interruptible
    from app.wiring import PolicyFactory, SeatSpecError, parse_seat_specs, seat_args
    from evaluation.task_sets import evaluation_sets, evaluators
    from graphs.policies.adapter_folder import AdapterFolderError
    from graphs.policies.base import BackendError, SamplingParams
    from graphs.registry import UnknownGameError, get_game
    from graphs.tasks.base import TaskSourceError
    from training.deploy import GateError, LivePolicies, gate_and_deploy
    from training.registry import RegistryError, get_version, newest_candidate

    chosen, engine = _store(database_url, progress)
    try:
        spec = get_game(game)
        game_options = spec.make_options(dict(options or {}))
        seat_specs = parse_seat_specs(spec, seat_args(seats), options=game_options)
        task_sets = evaluation_sets(spec, tasks or spec.tasks.default, eval_tasks, chosen.seed, guards)
        version = get_version(engine, candidate) if candidate else newest_candidate(engine, role)
    except (UnknownGameError, SeatSpecError, TaskSourceError, RegistryError, ValueError) as exc:
        raise InputError(str(exc)) from exc
    if version is None:
        raise InputError(f"role {role!r} has no candidate version; train one with `sparring train sft --role {role}`")
    if version.is_verifier:
        raise InputError(f"{version.name} is a verifier, which no game's gate measures: measure it with `sparring "
                         f"eval-verifier {version.name}`, then promote it by hand with `sparring adapters promote "
                         f"{version.name}`")
    factory = PolicyFactory(chosen, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens), engine,
                            deciding=True)

    async def main() -> GateResult:
        try:
            live = LivePolicies(await factory.policies(seat_specs))
            evaluate, *guard_sets = evaluators(engine, spec, task_sets, chosen.seed, game_options, concurrency)
            return await gate_and_deploy(engine, version, factory.model_backend(), live, evaluate, margin=margin,
                                         guards=guard_sets)
        finally:
            await factory.aclose()

    progress.gating(version.name, {name: len(task_list) for name, task_list in task_sets.items()})
    try:
        return run_interruptible(main())
    except (GateError, RegistryError) as exc:
        raise InputError(str(exc)) from exc
    except AdapterFolderError as exc:  # its message says how to recover: restore or reject the candidate
        raise RunError(f"cannot deploy {version.name}: {one_line(exc)}") from exc
    except BackendError as exc:
        raise RunError(f"cannot deploy {version.name}: {one_line(exc)} To set this candidate aside (deploy then "
                       f"takes the newest other one): `sparring adapters reject {version.name}`") from exc


def _deploy_external(role: str, candidate: str | None, game: str, *, eval_script: str | None,
                     candidate_run: str | None, baseline_run: str | None, metric: str, margin: float,
                     database_url: str | None, progress: DeployProgress) -> GateResult:
    """Gate the candidate with the evaluation script, or on two runs already logged."""
    from app.wiring import PolicyFactory
    from graphs.policies.base import SamplingParams
    from training.registry import RegistryError, get_version, newest_candidate

    runs = (candidate_run, baseline_run)
    if eval_script is None and None in runs:
        raise InputError(f"game {game!r} is not registered (`sparring games` lists those that are): its gate needs "
                         "your evaluation. Give --eval-script (run once with the candidate, once with the active "
                         "version, through a gateway started here), or --candidate-run and --baseline-run (two runs "
                         "of evaluation episodes already logged). " + SCRIPT_HELP)
    if eval_script is not None and runs != (None, None):
        raise InputError("--eval-script plays the two evaluations, --candidate-run and --baseline-run name two "
                         "already played: give one or the other")
    chosen, engine = _store(database_url, progress)
    try:
        version = get_version(engine, candidate) if candidate else newest_candidate(engine, role)
    except RegistryError as exc:
        raise InputError(str(exc)) from exc
    if version is None:
        raise InputError(f"role {role!r} has no candidate version; train one with `sparring train sft --game {game} "
                         f"--role {role}`")
    if version.is_verifier:
        raise InputError(f"{version.name} is a verifier, which no gate measures: promote it by hand with `sparring "
                         f"adapters promote {version.name}`")
    if eval_script is None:
        served = chosen.served_model if chosen.backend == "vllm" else chosen.model
        return _gated(lambda: _gate_runs(engine, version, game, candidate_run, baseline_run, served, metric, margin),
                      version)
    factory = PolicyFactory(chosen, SamplingParams(), engine, deciding=True)
    try:
        return _gated(lambda: _gate_script(engine, factory, version, eval_script, game, metric, margin, progress),
                      version)
    finally:
        asyncio.run(factory.aclose())


def _gate_runs(engine: Engine, version: AdapterRecord, game: str, candidate_run: str, baseline_run: str,
               served: str, metric: str, margin: float) -> GateResult:
    from training.external_gate import gate_runs

    return gate_runs(engine, version, candidate_run, baseline_run, game=game, base_model=served, metric=metric,
                     margin=margin)


def _gate_script(engine: Engine, factory: PolicyFactory, version: AdapterRecord, command: str, game: str, metric: str,
                 margin: float, progress: DeployProgress) -> GateResult:
    from app.gateway.scripts import gate_with_script

    return gate_with_script(engine, factory, version, command, game=game, metric=metric, margin=margin,
                            say=progress.say)


def _gated(gate: Callable[[], GateResult], version: AdapterRecord) -> GateResult:
    """``gate()``, its refusals as RunError (the candidate then stays a candidate)."""
    from app.gateway.scripts import ScriptError
    from graphs.policies.adapter_folder import AdapterFolderError
    from training.deploy import GateError
    from training.registry import RegistryError

    try:
        return gate()
    except (GateError, ScriptError, RegistryError) as exc:
        raise RunError(f"cannot gate {version.name}, which stays a candidate: {exc}") from exc
    except AdapterFolderError as exc:
        raise RunError(f"cannot deploy {version.name}: {one_line(exc)}") from exc

