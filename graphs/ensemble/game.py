"""ensemble as a game: seats, options, outcome, rewards, metrics and the solver's gate.

One learner seat, ``solver``, plays every agent: its turns differ by the variant in their
prompt (and in their ``correct`` reward's info). The builders key rows on the role and group
samples by the exact prompt, so one seat gives one adapter trained on every variant's turns,
each credited by its own correctness and compared only with turns of the same variant and
task (SFT's best-of-state, GRPO/PPO's group normalisation). A seat per variant would instead
fix the variants in the seat list, where ``--variants`` could no longer choose them, and
train one adapter per instruction for what is one skill.
"""

from __future__ import annotations

from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric
from graphs.credit import CORRECT
from graphs.ensemble.judge_prompt import read_judge_prompt
from graphs.ensemble.metrics import ensemble_metrics
from graphs.ensemble.options import EnsembleOptions
from graphs.ensemble.prompts import agent_messages
from graphs.ensemble.state import PICK_CORRECT
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks import MATH_TASKS
from graphs.tasks.base import Task

SEATS = (
    Seat("solver", SeatKind.LEARNER, "Plays every agent: answers the problem once per agent, under its variant."),
    Seat("judge", SeatKind.JUDGE, "The majority vote (no model call); with a model, picks among distinct answers.",
         RULES),
)


def initial_state(task: Task, options: EnsembleOptions) -> dict[str, Any]:
    return {"answers": [], "team": None}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: correctness of the team answer (None without ground truth)."""
    answers, team = state["answers"], state["team"]
    values = [a["value"] for a in answers]
    summary = {
        "variants": [a["variant"] for a in answers],
        "answers": values,
        "correct_by_agent": [a["correct"] for a in answers],
        "team_answer": team["answer"],
        "decided_by": team["decided_by"],
        "team_correct": team["correct"],
        "agreeing": sum(v is not None and v == team["answer"] for v in values),
    }
    return EpisodeOutcome(reward=None if team["correct"] is None else float(team["correct"]), summary=summary)


GAME = GameSpec(
    name="ensemble",
    description="K agents answer under different instruction variants; the majority vote (or a judge "
                "model's pick) is the team answer.",
    seats=SEATS,
    graph="graphs.ensemble.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=EnsembleOptions,
    tasks=MATH_TASKS,
    judge_prompt=read_judge_prompt,
    rewards={
        CORRECT: "solver: each agent's answer matches the ground truth (1/0, 0 when unparsed; info: variant)",
        PICK_CORRECT: "judge (a model): the answer it picked matches the ground truth (1/0)",
    },
    metrics=ensemble_metrics,
    gate_metrics={"solver": GateMetric("solver_accuracy")},
    first_prompt=lambda task: agent_messages(task.question, "plain"),
    report_metrics=("solver_accuracy", "vote_accuracy", "agreement"),
)
