"""Gate and deploy: a candidate adapter replaces the active one only if it is not worse.

Both versions play the same held-out tasks with the same seeds and greedy decoding, every
other seat unchanged, and are compared paired by task on the role's gate metric (the game's
``GameSpec.gate_metrics``): the candidate is promoted when the mean difference (candidate minus active) is at least
-margin on the deciding set, and no family of tasks got worse beyond noise there or in a guard
set (``evaluation.families``: other wordings, other levels, a user's file). The decision comes
with one sentence that says why (the difference, its paired 95% interval, the tasks each did
better on, McNemar's exact p and n; a refused family by name). Promotion hot-loads the adapter into
the live backend through the deploy interface (``Backend.load_adapter`` by its immutable
``role@vN`` name), and ``LivePolicies`` switches new episodes to it while episodes already
running finish on the version they started with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Engine

from evaluation.evaluator import EvaluationResult, Evaluator
from evaluation.families import FamilyFinding, compare_families
from graphs.contract import GameContractError, GateMetric
from graphs.metrics.stats import Estimate, PairedComparison, paired
from graphs.policies.base import Backend
from graphs.policies.policy import Policy
from storage.gate_rows import insert_evaluation
from training.adapter_folders import verify_folder
from training.registry import AdapterRecord, active_version, promote, reject

TOLERANCE = 1e-9
"""Float noise allowed below -margin (two identical evaluations differ by exactly 0)."""


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
    margin: float
    promoted: bool
    reason: str
    """one sentence: the decision, the paired difference with its interval, flips, p and n"""
    comparison: PairedComparison | None
    """candidate minus baseline on the tasks both played (None when either has no figure)"""
    candidate_eval: EvaluationResult
    baseline_eval: EvaluationResult
    guard_evals: dict[str, tuple[EvaluationResult, EvaluationResult]] = field(default_factory=dict)
    """guard set name -> (candidate's, baseline's) evaluations"""
    families: dict[str, dict[str, PairedComparison]] = field(default_factory=dict)
    """set name (the deciding set first) -> family -> candidate minus baseline on the gate metric"""
    regressions: tuple[FamilyFinding, ...] = ()
    """the families worse beyond noise (any refuses the candidate)"""

    @property
    def candidate_value(self) -> float | None:
        return self.candidate_eval.metrics.get(self.metric, Estimate(None, 0)).value

    @property
    def baseline_value(self) -> float | None:
        return self.baseline_eval.metrics.get(self.metric, Estimate(None, 0)).value

    def figures(self) -> dict[str, Any]:
        """What the registry and the evaluations table keep (JSON)."""
        return {
            "metric": self.metric, "candidate": self.candidate_value, "baseline": self.baseline_value,
            "baseline_version": self.baseline, "margin": self.margin,
            "decision": "promoted" if self.promoted else "rejected", "reason": self.reason,
            "comparison": self.comparison.to_dict() if self.comparison else None,
            "candidate_run": self.candidate_eval.run_id, "baseline_run": self.baseline_eval.run_id,
            "candidate_metrics": {k: e.to_dict() for k, e in self.candidate_eval.metrics.items()},
            "baseline_metrics": {k: e.to_dict() for k, e in self.baseline_eval.metrics.items()},
            "guards": {name: {"candidate_run": cand.run_id, "baseline_run": base.run_id,
                              "candidate_metrics": {k: e.to_dict() for k, e in cand.metrics.items()},
                              "baseline_metrics": {k: e.to_dict() for k, e in base.metrics.items()}}
                       for name, (cand, base) in self.guard_evals.items()},
            "families": {name: {family: c.to_dict() for family, c in found.items()}
                         for name, found in self.families.items()},
            "regressions": [finding.describe() for finding in self.regressions],
        }


def decide(candidate: str, baseline: str, gate: GateMetric, margin: float, cand: EvaluationResult,
           base: EvaluationResult) -> tuple[bool, str, PairedComparison | None]:
    """Promote when the paired difference on the gate metric is at least -margin; say why either way."""
    metric = gate.name
    missing = [(name, e) for name, e in (("candidate", cand), ("baseline", base)) if not e.per_task.get(metric)]
    if missing:
        why = "; ".join(f"the {name} has no {metric} figure ({_no_figure(gate, e)}, run {e.run_id[:12]})"
                        for name, e in missing)
        return False, f"rejected {candidate} against {baseline}: {why}", None
    comparison = paired(cand.per_task[metric], base.per_task[metric])
    promoted = comparison.difference.value >= -margin - TOLERANCE
    rule = f"{'not ' if promoted else ''}worse by more than the margin ({100 * margin:g} pts)"
    verb = "promoted" if promoted else "rejected"
    return promoted, f"{verb} {candidate} against {baseline}: {metric} {comparison.describe()}, {rule}", comparison


def _no_figure(gate: GateMetric, evaluation: EvaluationResult) -> str:
    if evaluation.failed:
        return f"{evaluation.failed} of {evaluation.episodes} episodes failed"
    return gate.needs


def guard(gate: GateMetric, sets: Mapping[str, tuple[Evaluator, EvaluationResult, EvaluationResult]],
          ) -> tuple[dict[str, dict[str, PairedComparison]], tuple[FamilyFinding, ...]]:
    """Each set's families compared on the gate metric (set name -> (evaluator, candidate's,
    baseline's evaluation)), and the families worse beyond noise."""
    compared, worse = {}, []
    for name, (evaluator, cand, base) in sets.items():
        cand_tasks, base_tasks = cand.per_task.get(gate.name), base.per_task.get(gate.name)
        if not cand_tasks or not base_tasks:
            continue
        compared[name], found = compare_families(name, cand_tasks, base_tasks, evaluator.tasks)
        worse += found
    return compared, tuple(worse)


async def gate_and_deploy(
    engine: Engine,
    candidate: AdapterRecord,
    backend: Backend,
    live: LivePolicies,
    evaluate: Evaluator,
    *,
    margin: float = 0.0,
    guards: Sequence[Evaluator] = (),
) -> GateResult:
    """Evaluate ``candidate`` against the role's active version on the same tasks and compare
    them paired by task; promote and hot-load it, or reject it, recording why either way.
    ``guards``: more task sets both play, where no family may get worse beyond noise."""
    role = candidate.role
    try:
        gate = evaluate.game.gate_metric(role)
    except GameContractError as exc:
        raise GateError(str(exc)) from exc
    if role not in live():
        raise GateError(f"role {role!r} has no seat in game {evaluate.game.name!r}")
    names = [evaluate.name, *(e.name for e in guards)]
    if len(set(names)) < len(names):
        raise GateError(f"the gate's task sets need distinct names, got {names}")
    verify_folder(candidate.path, base_model=candidate.base_model, status=candidate.status)
    active = active_version(engine, role)
    if candidate.name not in backend.adapters():
        await backend.load_adapter(candidate.name, str(candidate.path))
    if active is not None and active.name not in backend.adapters():
        await backend.load_adapter(active.name, str(active.path))

    def with_adapter(adapter: str | None) -> dict[str, Policy]:
        policies = live()
        policies[role] = replace(policies[role], adapter=adapter, label="")
        return policies

    baseline = active.name if active else "base"
    base_eval = await evaluate(with_adapter(active.name if active else None),
                               label=f"gate baseline for {candidate.name}")
    cand_eval = await evaluate(with_adapter(candidate.name), label=f"gate candidate {candidate.name}")
    guard_evals = {}
    for extra in guards:
        guard_base = await extra(with_adapter(active.name if active else None),
                                 label=f"gate baseline for {candidate.name}, {extra.name}")
        guard_evals[extra.name] = (
            await extra(with_adapter(candidate.name), label=f"gate candidate {candidate.name}, {extra.name}"),
            guard_base)
    promoted, reason, comparison = decide(candidate.name, baseline, gate, margin, cand_eval, base_eval)
    families, worse = guard(gate, {evaluate.name: (evaluate, cand_eval, base_eval),
                                   **{e.name: (e, *guard_evals[e.name]) for e in guards}})
    if promoted and worse:
        promoted = False
        reason = (f"rejected {candidate.name} against {baseline}: {gate.name} "
                  f"{comparison.difference.signed() if comparison else '-'} overall, but worse beyond noise on "
                  + "; ".join(finding.describe() for finding in worse))
    result = GateResult(role, candidate.name, baseline, gate.name, margin, promoted, reason, comparison,
                        cand_eval, base_eval, guard_evals, families, worse)
    record_decision(engine, candidate, active, result, game=evaluate.game.name, split=evaluate.name,
                    n_tasks=len(evaluate.tasks), seed=evaluate.seed)
    if result.promoted:
        live.swap(role, candidate.name)
        keep = {candidate.name, active.name if active else None}
    else:
        keep = {active.name if active else None}
    await _unload_older(backend, role, keep)
    return result


def record_decision(engine: Engine, candidate: AdapterRecord, active: AdapterRecord | None, result: GateResult, *,
                    game: str, split: str, n_tasks: int, seed: int) -> None:
    """Keep the gate's figures (an ``evaluations`` row) and promote or reject the candidate."""
    insert_evaluation(
        engine, adapter_version_id=candidate.id, baseline_version_id=active.id if active else None,
        game=game, split=split, n_tasks=n_tasks, seed=seed, metrics=result.figures(),
    )
    if result.promoted:
        promote(engine, candidate.name, eval=result.figures())
    else:
        reject(engine, candidate.name, eval=result.figures())


async def _unload_older(backend: Backend, role: str, keep: set[str | None]) -> None:
    """Free the backend's adapter slots (vLLM has ``--max-loras`` of them): a rejected candidate
    goes at once; a retired version stays loaded until the next deploy of its role, because
    episodes that started on it before the swap are still playing their next turns."""
    for name in backend.adapters():
        if name.startswith(f"{role}@") and name not in keep:
            await backend.unload_adapter(name)
