"""`sparring deploy` and `sparring retrain` for an external game, one the registry does not know
(played through `sparring gateway`): the user's scripts play it (docs/gateway.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.commands.common import clean_up_stale_work, err, fail, one_line, settings_or_exit, store_or_exit
from app.wiring import PolicyFactory
from graphs.policies.base import SamplingParams

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.settings import Settings
    from training.deploy import GateResult
    from training.loop import RetrainConfig, RoundOutcome
    from training.registry import AdapterRecord

SCRIPT_HELP = ("An external game (one played through `sparring gateway`) is played by your scripts: "
               "docs/gateway.md, 'Gate and retrain'.")


def registered(game: str) -> bool:
    from graphs.games import UnknownGameError, get_game

    try:
        get_game(game)
    except UnknownGameError:
        return False
    return True


def refuse_registered_options(game: str, given: dict[str, bool]) -> None:
    """Exit when options of a registered game's gate or loop (flag -> given) are given for ``game``."""
    if named := [flag for flag, was_given in given.items() if was_given]:
        fail(f"{', '.join(named)}: game {game!r} is external (not registered), and these options play a "
             "registered game's own tasks and seats; your scripts play an external game's. " + SCRIPT_HELP)


def deploy_external(role: str, candidate: str | None, game: str, *, eval_script: str | None,
                    candidate_run: str | None, baseline_run: str | None, metric: str, margin: float,
                    db: str | None) -> GateResult:
    """Gate ``candidate`` (default: the role's newest) with the evaluation script, or on two runs
    already logged, and promote or reject it."""
    from training.registry import RegistryError, get_version, newest_candidate

    runs = (candidate_run, baseline_run)
    if eval_script is None and None in runs:
        fail(f"game {game!r} is not registered (`sparring games` lists those that are): its gate needs your "
             "evaluation. Give --eval-script (run once with the candidate, once with the active version, "
             "through a gateway started here), or "
             "--candidate-run and --baseline-run (two runs of evaluation episodes already logged). " + SCRIPT_HELP)
    if eval_script is not None and runs != (None, None):
        fail("--eval-script plays the two evaluations, --candidate-run and --baseline-run name two already "
             "played: give one or the other")
    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    clean_up_stale_work(engine)
    try:
        chosen = get_version(engine, candidate) if candidate else newest_candidate(engine, role)
    except RegistryError as exc:
        fail(str(exc))
    if chosen is None:
        fail(f"role {role!r} has no candidate version; train one with `sparring train sft --game {game} --role "
             f"{role}`")
    if chosen.is_verifier:
        fail(f"{chosen.name} is a verifier, which no gate measures: promote it by hand with `sparring adapters "
             f"promote {chosen.name}`")
    if eval_script is None:
        return _gated(lambda: _gate_runs(engine, settings, chosen, game, candidate_run, baseline_run, metric,
                                         margin), chosen)
    factory = PolicyFactory(settings, SamplingParams(), engine, deciding=True)
    try:
        return _gated(lambda: _gate_script(engine, factory, chosen, eval_script, game, metric, margin), chosen)
    finally:
        asyncio.run(factory.aclose())


def _gate_runs(engine: Engine, settings: Settings, chosen: AdapterRecord, game: str, candidate_run: str,
               baseline_run: str, metric: str, margin: float) -> GateResult:
    from training.external_gate import gate_runs

    served = settings.served_model if settings.backend == "vllm" else settings.model
    return gate_runs(engine, chosen, candidate_run, baseline_run, game=game, base_model=served, metric=metric,
                     margin=margin)


def _gate_script(engine: Engine, factory: PolicyFactory, chosen: AdapterRecord, command: str, game: str,
                 metric: str, margin: float) -> GateResult:
    from app.gateway.scripts import gate_with_script

    def say(message: str) -> None:
        err.print(f"[dim]{message}[/]", highlight=False)

    return gate_with_script(engine, factory, chosen, command, game=game, metric=metric, margin=margin, say=say)


def _gated(gate: Callable[[], GateResult], chosen: AdapterRecord) -> GateResult:
    """``gate()``, its refusals as the command's errors (the candidate then stays a candidate)."""
    from app.gateway.scripts import ScriptError
    from graphs.policies.adapter_folder import AdapterFolderError
    from training.deploy import GateError
    from training.registry import RegistryError

    try:
        return gate()
    except (GateError, ScriptError, RegistryError) as exc:
        fail(f"cannot gate {chosen.name}, which stays a candidate: {exc}", code=1)
    except AdapterFolderError as exc:
        fail(f"cannot deploy {chosen.name}: {one_line(exc)}", code=1)


def retrain_external(game: str, config: RetrainConfig, *, play_script: str, eval_script: str, metric: str,
                     rounds: int, settings: Settings, say: Callable[[str], None]) -> list[RoundOutcome]:
    """``rounds`` rounds of ``app.gateway.rounds.external_round``; models loaded once for all."""
    from app.gateway.rounds import Scripts, external_round
    from app.gateway.scripts import ScriptError

    engine = store_or_exit(settings)
    clean_up_stale_work(engine)
    playing = PolicyFactory(settings, SamplingParams(), engine)  # the gateway takes each request's sampling
    deciding = PolicyFactory(settings, SamplingParams(), engine, deciding=True)
    scripts = Scripts(play_script, eval_script, metric)
    outcomes = []
    try:
        for index in range(1, rounds + 1):
            outcomes.append(external_round(engine, playing, deciding, game, config, scripts, round_index=index,
                                           say=say))
    except ScriptError as exc:
        fail(f"retrain round {len(outcomes) + 1} stopped: {exc}", code=1)
    finally:
        asyncio.run(playing.aclose())
        asyncio.run(deciding.aclose())
    return outcomes
