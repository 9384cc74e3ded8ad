"""One retrain round of an external game, played by the user's scripts through a gateway started
in this process (`sparring retrain --game NAME --play-script ... --eval-script ...`).

For each role: the play script runs once (``app.gateway.scripts``: its episodes are training data,
split train, the role's seat played by ``ROLE``, its active version, or by ``base`` while it has
none); then each role's rows since the watermark are built, a candidate trained from the active
version and gated by the evaluation script (``gate_with_script``), as a registered game's round
does (``training.loop.train_and_gate``). A role whose step fails is recorded in the round's outcome
and the next role goes on; a play script that fails stops the round (its error says why). The round
is a run of the game whose summary says what happened.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from sqlalchemy import Engine

from app.gateway.naming import BASE
from app.gateway.scripts import gate_with_script, run_script
from app.wiring import PolicyFactory
from storage.models import RunStatus
from storage.recorder import Recorder
from storage.records import RunRecord
from training.external_gate import HEADLINE
from training.deploy import GateResult
from training.loop import RetrainConfig, RoleOutcome, RoundOutcome, train_and_gate
from training.registry import AdapterRecord, active_version


@dataclass(frozen=True)
class Scripts:
    play: str
    """the command line that plays training episodes"""
    evaluate: str
    """the command line that plays evaluation episodes (the gate runs it once per version)"""
    metric: str = HEADLINE
    """what the gate compares (``training.external_gate``)"""


def external_round(engine: Engine, playing: PolicyFactory, deciding: PolicyFactory, game: str,
                   config: RetrainConfig, scripts: Scripts, *, round_index: int,
                   say: Callable[[str], None] = lambda message: None) -> RoundOutcome:
    """One round; ``playing`` serves the play script, ``deciding`` the gates (in the deciding precision)."""
    started = time.perf_counter()
    settings = playing.settings
    run = RunRecord.new(game, {"purpose": f"retrain round {round_index}", "config": asdict(config),
                               "scripts": asdict(scripts)}, settings.seed)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        status, summary = RunStatus.INTERRUPTED, {"round": round_index}
        try:
            episodes = 0
            for role in config.roles:
                active = active_version(engine, role)
                model = role if active else BASE
                say(f"round {round_index}: {role} plays as {model}: {scripts.play}")
                episodes += run_script(engine, playing, scripts.play, game=game, role=role, model=model,
                                       split="train", purpose=f"retrain round {round_index}: {role} plays").episodes
            outcomes = [asyncio.run(_train_and_gate(engine, deciding, game, config, scripts, role, say=say))
                        for role in config.roles]
            status, summary = RunStatus.FINISHED, {"round": round_index, "episodes": episodes,
                                                   "roles": [asdict(o) for o in outcomes]}
        except Exception:
            status = RunStatus.FAILED
            raise
        finally:
            recorder.finish_run(run.id, status, summary)
    return RoundOutcome(round_index, episodes, outcomes, time.perf_counter() - started)


async def _train_and_gate(engine: Engine, deciding: PolicyFactory, game: str, config: RetrainConfig,
                          scripts: Scripts, role: str, *, say: Callable[[str], None]) -> RoleOutcome:
    settings = deciding.settings

    async def gate(adapter: AdapterRecord) -> GateResult:
        return await asyncio.to_thread(gate_with_script, engine, deciding, adapter, scripts.evaluate, game=game,
                                       metric=scripts.metric, margin=config.margin, say=say)

    return await train_and_gate(engine, game, config, role, gate, gated_on=f"the evaluation script's {scripts.metric}",
                                base_model=settings.model, device=settings.device, store_dir=settings.store_dir,
                                cache_dir=settings.cache_dir, seed=settings.seed, say=say,
                                progress=lambda step, total: None)
