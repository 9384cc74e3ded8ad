"""Gate and deploy: a candidate adapter replaces the active one only if it is not worse.

Both versions play the same held-out tasks with the same seeds and greedy decoding, every
other seat unchanged; the role's gate metric decides. Promotion hot-loads the adapter into
the live backend through the deploy interface (``Backend.load_adapter`` by its immutable
``role@vN`` name), and ``LivePolicies`` switches new episodes to it while episodes already
running finish on the version they started with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine

from graphs.policies.base import Backend
from graphs.policies.policy import Policy
from storage.models import Evaluation
from training.adapter_files import verify_folder
from training.evaluator import Evaluator
from training.registry import AdapterRecord, active_version, promote, reject

GATE_METRICS = {"actor": "pass@turn-1", "critic": "critic_accuracy", "debater_a": "debater_a_win_rate"}
"""The metric a role's candidate is judged on (higher is better)."""


class GateError(RuntimeError):
    pass


class LivePolicies:
    """The policies new episodes get; ``swap`` changes a seat's adapter for episodes started later."""

    def __init__(self, policies: Mapping[str, Policy]) -> None:
        self._policies = dict(policies)

    def __call__(self) -> dict[str, Policy]:
        return dict(self._policies)

    def swap(self, seat: str, adapter: str | None) -> None:
        self._policies[seat] = replace(self._policies[seat], adapter=adapter, label="")


@dataclass(frozen=True)
class GateResult:
    role: str
    candidate: str
    baseline: str
    """the active version, or "base" when the role had none"""
    metric: str
    candidate_value: float
    baseline_value: float
    margin: float
    promoted: bool
    candidate_metrics: dict[str, Any]
    baseline_metrics: dict[str, Any]

    def figures(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "candidate": self.candidate_value, "baseline": self.baseline_value,
            "baseline_version": self.baseline, "margin": self.margin,
            "candidate_metrics": self.candidate_metrics, "baseline_metrics": self.baseline_metrics,
        }


async def gate_and_deploy(
    engine: Engine,
    candidate: AdapterRecord,
    backend: Backend,
    live: LivePolicies,
    evaluate: Evaluator,
    *,
    margin: float = 0.0,
) -> GateResult:
    """Evaluate ``candidate`` against the role's active version; promote and hot-load it, or
    reject it, recording the figures either way."""
    role = candidate.role
    metric = GATE_METRICS.get(role)
    if metric is None:
        raise GateError(f"no gate metric for role {role!r}; roles with one: {', '.join(GATE_METRICS)}")
    if role not in live():
        raise GateError(f"role {role!r} has no seat in game {evaluate.game.name!r}")
    verify_folder(candidate.path, base_model=candidate.base_model)
    active = active_version(engine, role)
    if candidate.name not in backend.adapters():
        await backend.load_adapter(candidate.name, str(candidate.path))
    if active is not None and active.name not in backend.adapters():
        await backend.load_adapter(active.name, str(active.path))

    def with_adapter(adapter: str | None) -> dict[str, Policy]:
        policies = live()
        policies[role] = replace(policies[role], adapter=adapter, label="")
        return policies

    base_metrics = await evaluate(with_adapter(active.name if active else None),
                                  label=f"gate baseline for {candidate.name}")
    cand_metrics = await evaluate(with_adapter(candidate.name), label=f"gate candidate {candidate.name}")
    cand_value, base_value = cand_metrics.get(metric), base_metrics.get(metric)
    if cand_value is None or base_value is None:
        raise GateError(f"the evaluation produced no {metric} figure (did every episode fail? see the gate runs "
                        f"{base_metrics['run_id'][:12]} and {cand_metrics['run_id'][:12]})")
    result = GateResult(role, candidate.name, active.name if active else "base", metric, cand_value, base_value,
                        margin, cand_value >= base_value - margin, cand_metrics, base_metrics)
    with engine.begin() as conn:
        conn.execute(Evaluation.__table__.insert().values(
            adapter_version_id=candidate.id, baseline_version_id=active.id if active else None,
            game=evaluate.game.name, split="heldout", n_tasks=len(evaluate.tasks), seed=evaluate.seed,
            metrics=result.figures(),
        ))
    if result.promoted:
        promote(engine, candidate.name, eval=result.figures())
        live.swap(role, candidate.name)
        keep = {candidate.name, active.name if active else None}
    else:
        reject(engine, candidate.name, eval=result.figures())
        keep = {active.name if active else None}
    await _unload_older(backend, role, keep)
    return result


async def _unload_older(backend: Backend, role: str, keep: set[str | None]) -> None:
    """Free the backend's adapter slots (vLLM has ``--max-loras`` of them): a rejected candidate
    goes at once; a retired version stays loaded until the next deploy of its role, because
    episodes that started on it before the swap are still playing their next turns."""
    for name in backend.adapters():
        if name.startswith(f"{role}@") and name not in keep:
            await backend.unload_adapter(name)
