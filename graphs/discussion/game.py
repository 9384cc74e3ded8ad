"""discussion as a game: seats, options, outcome, rewards, metrics and the agents' gates.

Every agent seat is a learner with an adapter of its own, and may be filled by another base
model (``--seat agent_2=model:PATH_OR_ID``) or a hosted one (``openai:MODEL``). Only the
first ``--agents`` seats play (``seats_in_play``): the others need no policy and a ``--seat``
for one is refused. An agent's credit is the default one, the sum of its turn's rewards: its
``correct`` plus, with ``--move-bonus``, the ``move_bonus`` its right answer earned.
"""

from __future__ import annotations

from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric
from graphs.credit import CORRECT
from graphs.discussion.metrics import discussion_metrics
from graphs.discussion.options import DiscussionOptions
from graphs.discussion.prompts import first_messages
from graphs.discussion.state import AGENTS, MOVE_BONUS, answers_of_round
from graphs.judges.majority import majority_index
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks import MATH_TASKS
from graphs.tasks.base import Task

SEATS = (
    *(Seat(seat, SeatKind.LEARNER, f"Discussant {seat[-1]}: answers, reads the others' answers, answers again.")
      for seat in AGENTS),
    Seat("judge", SeatKind.JUDGE, "Checks every answer against the ground truth (no model call).", RULES,
         takes_policy=False),
)


def seats_in_play(options: DiscussionOptions) -> tuple[str, ...]:
    return (*AGENTS[: options.agents], "judge")


def initial_state(task: Task, options: DiscussionOptions) -> dict[str, Any]:
    return {"answers": []}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: the share of agents whose final answer is right (None without truth)."""
    answers = state["answers"]
    last = max(a["round"] for a in answers)
    by_round = [answers_of_round(answers, r) for r in range(last + 1)]
    final = by_round[-1]
    has_truth = final[0]["correct"] is not None
    majority = majority_index([a["value"] for a in final])
    summary = {
        "answers_by_round": [[a["value"] for a in round_] for round_ in by_round],
        "correct_by_round": [[a["correct"] for a in round_] for round_ in by_round],
        "final_majority": None if majority is None else final[majority]["value"],
        "final_majority_correct": (majority is not None and bool(final[majority]["correct"])) if has_truth else None,
    }
    reward = sum(bool(a["correct"]) for a in final) / len(final) if has_truth else None
    return EpisodeOutcome(reward=reward, summary=summary)


GAME = GameSpec(
    name="discussion",
    description="N agents (2-5, each its own model if wanted) answer, read each other's answers and answer "
                "again over rounds; the rules judge scores every answer.",
    seats=SEATS,
    graph="graphs.discussion.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=DiscussionOptions,
    tasks=MATH_TASKS,
    rewards={
        CORRECT: "each agent turn: its answer matches the ground truth (1/0, 0 when unparsed)",
        MOVE_BONUS: "an agent's right answer: --move-bonus per agent it moved from wrong to right in the next round",
    },
    metrics=discussion_metrics,
    gate_metrics={seat: GateMetric(f"{seat}:final", f"{seat} plays only with --agents {seat[-1]} or more, on "
                                   "tasks with a ground truth") for seat in AGENTS},
    first_prompt=lambda task: first_messages(task.question),
    report_metrics=("round-1", "discussion_gain", "final_majority", "agent_1:final"),
    seats_in_play=seats_in_play,
)
