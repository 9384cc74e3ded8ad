"""negotiation as a game: seats, options, tasks, bots, outcome, rewards, credit, metrics and the gate.

The proposer is gated on ``own_value_share``: the negotiator's own objective, which its credit
rule rewards. No deal is worth 0, so neither demanding too much of a tough counterpart nor
accepting anything can raise it; fairness (a property of the deal that the proposer could
raise by giving value away) and coherence are reported beside it, not gated on.
"""

from __future__ import annotations

from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric
from graphs.negotiation import credit
from graphs.negotiation.bots import BOTS
from graphs.negotiation.metrics import negotiation_metrics
from graphs.negotiation.options import NegotiationOptions
from graphs.negotiation.pool import Pool
from graphs.negotiation.prompts import negotiator_messages
from graphs.negotiation.tasks import NEGOTIATION_TASKS
from graphs.policies.base import Message
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks.base import Task

SEATS = (
    Seat("proposer", SeatKind.LEARNER, "Opens the bargaining; moves alternate: propose a split or accept an offer."),
    Seat("counterpart", SeatKind.CONTEXT, "Bargains against the proposer: a scripted strategy (scripted:tough, "
         "scripted:fair, scripted:conceding) or a model.", "scripted:fair"),
    Seat("judge", SeatKind.JUDGE, "Scores the deal's fairness and each side's coherence by rules; with a model, "
         "the model also scores the proposer's coherence.", RULES),
)


def initial_state(task: Task, options: NegotiationOptions) -> dict[str, Any]:
    Pool.from_meta(task.meta)  # a task that is no pool fails here, naming the fix
    return {"moves": [], "decision": None}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: the proposer's value share (0 without a deal)."""
    decision, moves = state["decision"], state["moves"]
    scores = decision["scores"]
    summary = {
        "agreement": decision["proposer_take"] is not None,
        "proposer_take": decision["proposer_take"],
        "value_share": scores["share"],
        "fairness": scores["nash_ratio"],
        "pareto_share": scores["pareto_share"],
        "pareto_optimal": scores["pareto_optimal"],
        "coherence": decision["coherence"],
        "judge_coherence": decision["judge_coherence"],
        "moves": [m["line"] for m in moves],
        "problems": [f"{m['seat']}: {m['problem']}" for m in moves if m["problem"]],
    }
    return EpisodeOutcome(reward=scores["share"]["proposer"], summary=summary)


def first_prompt(task: Task) -> list[Message]:
    return negotiator_messages(Pool.from_meta(task.meta), "proposer", [], NegotiationOptions().max_turns)


GAME = GameSpec(
    name="negotiation",
    description="A proposer and a counterpart split a pool of items with private values; judged on fairness "
                "(Nash product, Pareto share) and coherence.",
    seats=SEATS,
    graph="graphs.negotiation.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=NegotiationOptions,
    rewards={
        credit.VALID: "each move: a move line, within the pool, an Accept only of a standing offer (1/0)",
        credit.COHERENT: "each move: valid and consistent with the speaker's earlier moves (1/0)",
        credit.VALUE_SHARE: "each side's last move: what its share is worth to it over the pool's worth (0: no deal)",
        credit.AGREEMENT: "each side's last move: a deal was made (1/0)",
        credit.FAIRNESS: "each side's last move: the deal's Nash product over the best achievable (0..1)",
        credit.PARETO_SHARE: "each side's last move: the deal's joint value over the best joint value (0..1)",
        credit.COHERENCE: "each side's last move: the share of its moves that were coherent",
        credit.JUDGE_COHERENCE: "the proposer's last move: the judge model's coherence score (0..1)",
    },
    credit={"proposer": credit.NEGOTIATOR_CREDIT},
    metrics=negotiation_metrics,
    gate_metrics={"proposer": GateMetric("own_value_share")},
    first_prompt=first_prompt,
    report_metrics=("own_value_share", "agreement_rate", "fairness", "pareto_share", "coherence",
                    "invalid_move_rate"),
    tasks=NEGOTIATION_TASKS,
    bots=BOTS,
)
