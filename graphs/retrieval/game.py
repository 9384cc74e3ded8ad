"""retrieval as a game: seats, options, outcome, rewards, credit, metrics, gate and tasks."""

from __future__ import annotations

from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric
from graphs.credit import CORRECT
from graphs.retrieval.bots import BOTS
from graphs.retrieval.corpus import corpus_for
from graphs.retrieval.credit import CITED_GOLD, JUDGE_RELEVANCE, RELEVANCE, RESEARCHER_CREDIT
from graphs.retrieval.metrics import retrieval_metrics
from graphs.retrieval.options import RetrievalOptions
from graphs.retrieval.prompts import researcher_messages
from graphs.retrieval.tasks import QUESTIONS
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks.base import Task, TaskSourceError

SEATS = (
    Seat("researcher", SeatKind.LEARNER, "Reads the results of the game's search for the question, searches "
         "('Search: <keywords>', up to --searches times), then answers citing documents "
         "('Answer: <answer> [doc ids]')."),
    Seat("planter", SeatKind.CONTEXT, "Plants near-miss distractors of the gold document into the episode's search "
         "index (default: the near-miss bot; a model writes its own).", "scripted:near-miss"),
    Seat("judge", SeatKind.JUDGE, "Rules: the answer against the gold one, citations against the gold documents, "
         "fooled by a distractor; with a model, also a relevance score on a rubric.", RULES),
)


def initial_state(task: Task, options: RetrievalOptions) -> dict[str, Any]:
    """The empty episode; a question whose gold documents the corpus lacks fails here, named."""
    corpus = corpus_for(options.corpus)
    missing = [doc_id for doc_id in task.meta.get("gold_docs", []) if doc_id not in corpus]
    if missing or "gold_docs" not in task.meta:
        where = task.meta.get("location", task.id)
        raise TaskSourceError(
            f"{where}: gold document(s) {', '.join(missing) or '(none: not a retrieval question)'} not in the corpus "
            f"{corpus.name}; fix the question's gold_docs, or pass the corpus that holds them with --corpus FILE")
    return {"messages": [], "planted": [], "steps": [], "verdict": None}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: the answer is right (1/0)."""
    verdict, steps = state["verdict"], state["steps"]
    summary = {
        "answer": steps[-1]["text"],
        "cited": steps[-1]["cited"],
        "queries": [s["text"] for s in steps if s["kind"] == "search"],
        "answer_format": steps[-1]["formatted"] and steps[-1]["text"] is not None,
        "planted": [p["id"] for p in state["planted"]],
        **verdict,
    }
    return EpisodeOutcome(reward=float(verdict["correct"]), summary=summary)


def seats_in_play(options: RetrievalOptions) -> set[str]:
    return {"researcher", "judge"} | ({"planter"} if options.distractors else set())


GAME = GameSpec(
    name="retrieval",
    description="A researcher searches a corpus (SQLite FTS5) and answers citing documents; a planter plants "
                "near-miss distractors; judged on gold answers and gold documents.",
    seats=SEATS,
    graph="graphs.retrieval.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=RetrievalOptions,
    rewards={
        CORRECT: "researcher's answer turn: states the gold answer (normalised) and no distractor's number (1/0)",
        RELEVANCE: "researcher's answer turn: share of its cited documents that are gold (0 when none)",
        CITED_GOLD: "researcher's answer turn: share of the gold documents it cited",
        JUDGE_RELEVANCE: "researcher's answer turn: a model judge's relevance score (0..1), with a model judge",
    },
    credit={"researcher": RESEARCHER_CREDIT},
    metrics=retrieval_metrics,
    gate_metrics={"researcher": GateMetric("accuracy")},
    first_prompt=lambda task: researcher_messages(task.question, [], RetrievalOptions.searches),
    report_metrics=("accuracy", "relevance", "citation_precision", "citation_recall", "fooled_rate",
                    "search_budget_used"),
    tasks=QUESTIONS,
    seats_in_play=seats_in_play,
    bots=BOTS,
)
