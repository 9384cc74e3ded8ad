"""story as a game: seats, options, outcome, rewards, metrics, the writer's gate and practice."""

from __future__ import annotations

from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric, Practice
from graphs.seats import RULES, Seat, SeatKind
from graphs.story.bots import BOTS
from graphs.story.constraints import Constraints
from graphs.story.credit import WRITER_CREDIT
from graphs.story.metrics import story_metrics
from graphs.story.options import StoryOptions
from graphs.story.prompts import passage_messages
from graphs.story.state import WRITER
from graphs.story.tasks import STORY_TASKS
from graphs.tasks.base import Task

SEATS = (
    Seat("writer", SeatKind.LEARNER, "Writes every other passage (two candidates a turn) and the required ending."),
    Seat("co_writer", SeatKind.CONTEXT, "Writes the passages in between: a model, or a scripted bot "
                                        "(story-template keeps the constraints, story-contradiction breaks a fact)."),
    Seat("judge", SeatKind.JUDGE, "Checks consistency by rules; judges creativity with a model when the seat has "
                                  "one, else with a labelled rule proxy.", RULES),
)


def initial_state(task: Task, options: StoryOptions) -> dict[str, Any]:
    return {"passages": [], "choices": [], "verdict": None}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: the mean consistency score of the writer's kept passages."""
    verdict = state["verdict"]
    summary = {
        **verdict,
        "passages": len(state["passages"]),
        "co_writer_violations": sum(len(p["violations"]) for p in state["passages"] if p["seat"] != WRITER),
        "chosen_by": [choice["by"] for choice in state["choices"]],
    }
    return EpisodeOutcome(reward=verdict["writer_score"], summary=summary)


def first_prompt(task: Task) -> list[dict[str, str]]:
    """The writer's first prompt of a story (of two rounds or more: the default's)."""
    return passage_messages(Constraints.from_dict(task.meta["constraints"]), [], WRITER, last=False)


GAME = GameSpec(
    name="story",
    description="A writer and a co-writer extend a story in turns under constraints; rules judge consistency, "
                "a model (or a proxy) creativity.",
    seats=SEATS,
    graph="graphs.story.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=StoryOptions,
    rewards={
        "consistency": "every passage: the share of its constraint checks it passes (facts, forbidden phrases, "
                       "length; the writer's last: ending and cast too)",
        "creativity": "writer candidates of one turn that tie on consistency: 1 preferred, 0 rejected (by the judge "
                      "model, else the new-words proxy)",
    },
    credit={"writer": WRITER_CREDIT},
    metrics=story_metrics,
    gate_metrics={"writer": GateMetric("consistency_rate")},
    first_prompt=first_prompt,
    report_metrics=("consistency_rate", "violation_free_rate", "ending_reached_rate", "creativity_win_rate",
                    "creativity_proxy_win_rate"),
    # the writer alone: two passages around one scripted, consistent co-writer passage
    practice=Practice("writer", {"rounds": 2}, {"co_writer": "story-template"}),
    tasks=STORY_TASKS,
    bots=BOTS,
)
