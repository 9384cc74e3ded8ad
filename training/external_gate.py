"""The deploy gate of an external game (one played through `sparring gateway`): sparring does not
know its tasks, so the user's own evaluation plays both versions and the gate compares what it
logged.

Two runs are compared, the candidate's and the baseline's (the role's active version, or the base
model when it has none). Each must hold episodes of split eval, with every turn of the role's seat
served by the version it stands for, and each succeeded episode scored on the metric: ``reward``,
the headline reward its client sent with ``POST /v1/episodes/ID/end``, or any other name, the
latest reward event of that name for the role's seat. Both must have played the same task ids
(the ``id`` of the task an episode was opened with); a task played several times counts with the
mean of its episodes. The decision, its reason and what is kept are the registered games' gate's
(``training.deploy``: paired by task, promoted when the mean difference is at least -margin).
Anything that cannot be compared is a GateError, and then nothing is recorded and the candidate
stays a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from evaluation.evaluator import EvaluationResult
from graphs.contract import GateMetric
from graphs.metrics.run_metrics import per_task_means, task_means
from storage.gate_rows import run_log
from training.adapter_folders import verify_folder
from training.deploy import GateError, GateResult, decide, record_decision
from training.registry import AdapterRecord, active_version

HEADLINE = "reward"
"""the metric that is the episode's headline reward (POST /v1/episodes/ID/end)"""
EVAL_SPLIT = "eval"
SHOWN = 5
"""how many episode or task ids an error names"""


@dataclass(frozen=True)
class Side:
    """One side of the gate: the version it stands for, the run that played it, what served it."""

    version: str
    """``ROLE@vN``, or ``base``"""
    run_id: str
    served_by: str
    """what each turn of the role's seat must have been served by"""


def gate_runs(engine: Engine, candidate: AdapterRecord, candidate_run: str, baseline_run: str, *, game: str,
              base_model: str, metric: str = HEADLINE, margin: float = 0.0) -> GateResult:
    """Compare the candidate's run with the baseline's, paired by task on ``metric``; promote or
    reject the candidate and record why. ``base_model``: the name turns of the base model are
    logged as served by (the baseline, when the role has no active version)."""
    if candidate_run == baseline_run:
        raise GateError(f"the candidate and the baseline were given the same run {candidate_run}: each version's "
                        "evaluation is a run of its own")
    active = active_version(engine, candidate.role)
    baseline = Side(active.name, baseline_run, active.name) if active else Side("base", baseline_run, base_model)
    cand_eval = measure(engine, Side(candidate.name, candidate_run, candidate.name), candidate.role, game=game,
                        metric=metric)
    base_eval = measure(engine, baseline, candidate.role, game=game, metric=metric)
    check_same_tasks(cand_eval.per_task[metric], base_eval.per_task[metric], candidate.name, baseline.version)
    verify_folder(candidate.path, base_model=candidate.base_model, status=candidate.status)
    promoted, reason, comparison = decide(candidate.name, baseline.version, GateMetric(metric), margin, cand_eval,
                                          base_eval)
    result = GateResult(candidate.role, candidate.name, baseline.version, metric, margin, promoted, reason,
                        comparison, cand_eval, base_eval)
    record_decision(engine, candidate, active, result, game=game, split=EVAL_SPLIT,
                    n_tasks=len(cand_eval.per_task[metric]), seed=0)
    return result


def measure(engine: Engine, side: Side, role: str, *, game: str, metric: str) -> EvaluationResult:
    """``side``'s run as an evaluation: ``metric`` per task over its succeeded episodes (GateError
    when the run cannot stand for the version: see the module docstring)."""
    where = f"run {side.run_id} ({side.version})"
    logged = run_log(engine, side.run_id, role, None if metric == HEADLINE else metric)
    episodes, served, rewards = logged.episodes, logged.served, logged.rewards
    if not episodes:
        raise GateError(f"{where} logged no episode: the evaluation must open its episodes with POST /v1/episodes "
                        "(or call the gateway) while the gate runs it")
    if others := sorted({e.game for e in episodes} - {game}):
        raise GateError(f"{where} holds episodes of {', '.join(others)}, not of {game}: gate with --game "
                        f"{others[0]}, or give a run of {game}")
    if wrong := [e for e in episodes if e.split != EVAL_SPLIT]:
        raise GateError(f"{where}: {len(wrong)} episodes are of split {wrong[0].split!r}, not {EVAL_SPLIT}: open "
                        "the evaluation's episodes with the split in $SPARRING_GATEWAY_SPLIT (or none), so that "
                        "they are never trained on")
    if not served:
        raise GateError(f"{where} logged no turn of the seat {role!r}: name the seat of the role's calls with the "
                        "X-Sparring-Seat header (or metadata.seat), or call the model $SPARRING_GATEWAY_MODEL")
    if set(served) != {side.served_by}:
        found = ", ".join(f"{name} ({count} turns)" for name, count in sorted(served.items()))
        raise GateError(f"{where}: the seat {role!r} must be played by {side.version} alone, but its turns were "
                        f"served by {found}: call the model named in $SPARRING_GATEWAY_MODEL for that seat")
    succeeded = [e for e in episodes if e.status == "succeeded"]
    if not succeeded:
        raise GateError(f"{where}: none of its {len(episodes)} episodes succeeded: end each with POST "
                        "/v1/episodes/ID/end (status succeeded)")
    values = {e.id: e.reward if metric == HEADLINE else rewards.get(e.id) for e in succeeded}
    if unscored := [episode for episode, value in values.items() if value is None]:
        how = ('send its reward with its end (POST /v1/episodes/ID/end {"reward": ...})' if metric == HEADLINE else
               f'attach a reward named {metric!r} for the seat {role!r} (POST /v1/episodes/ID/rewards)')
        raise GateError(f"{where}: {len(unscored)} of its {len(succeeded)} succeeded episodes have no {metric} "
                        f"({_some(unscored)}): {how}, or gate on another metric with --metric")
    measured = task_means({metric: per_task_means((e.task_id, float(values[e.id])) for e in succeeded)})
    return EvaluationResult(measured.metrics, measured.per_task, side.run_id, f"gate {side.version}",
                            len(episodes), len(episodes) - len(succeeded))


def check_same_tasks(candidate: dict[str, float], baseline: dict[str, float], cand_name: str,
                     base_name: str) -> None:
    """GateError naming the tasks only one side played (a task whose episodes all failed is not played)."""
    only = {name: sorted(set(mine) - set(theirs))
            for name, mine, theirs in ((cand_name, candidate, baseline), (base_name, baseline, candidate))}
    if any(only.values()):
        said = "; ".join(f"only {name} played {len(tasks)}: {_some(tasks)}" for name, tasks in only.items() if tasks)
        raise GateError(f"the two evaluations played different tasks ({said}); a paired comparison needs the same "
                        "task ids both times: open each episode with its task's id (POST /v1/episodes "
                        '{"task": {"id": ...}}), the same tasks on each run, and end each episode succeeded')


def _some(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN])
    return shown if len(ids) <= SHOWN else f"{shown} and {len(ids) - SHOWN} more"
