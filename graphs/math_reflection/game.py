"""math-reflection as a game: seats, options, outcome, rewards, credit, metrics and gates."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric, Practice, Refinements, TruthVerdicts
from graphs.credit import CORRECT
from graphs.judges.answers import extract_answer
from graphs.judges.arithmetic import checker_notes, corrected
from graphs.judges.ground_truth import is_correct
from graphs.judges.majority import majority_index
from graphs.math_reflection.bots import BOTS
from graphs.math_reflection.credit import CRITIC_CREDIT, VERDICT_CORRECT
from graphs.math_reflection.metrics import reflection_metrics
from graphs.math_reflection.options import ReflectionOptions
from graphs.math_reflection.prompts import (
    ANSWER_FORMAT,
    VERDICT_LINE,
    actor_messages,
    critic_messages,
    refine_messages,
)
from graphs.policies.base import Message
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks import MATH_TASKS
from graphs.tasks.base import Task

SEATS = (
    Seat("actor", SeatKind.LEARNER, "Solves the problem, then refines its answer from the critique."),
    Seat("critic", SeatKind.LEARNER, "Reviews each answer and says 'Verdict: correct' or 'Verdict: incorrect'."),
    Seat("judge", SeatKind.JUDGE, "Checks each answer against the ground truth (no model call).", RULES,
         takes_policy=False),
)


def initial_state(task: Task, options: ReflectionOptions) -> dict[str, Any]:
    return {"answers": [], "correct": [], "critiques": []}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: correctness of the final answer (None without ground truth)."""
    answers = [answer["value"] for answer in state["answers"]]
    correct: list[bool | None] = state["correct"]
    has_truth = correct[-1] is not None
    verdicts = [c["verdict_correct"] for c in state["critiques"] if c["verdict_correct"] is not None]
    majority = majority_index(answers)
    summary = {
        "answers": answers,
        "correct_by_turn": correct,
        "first_correct": correct[0],
        "final_correct": correct[-1],
        "majority_correct": (majority is not None and bool(correct[majority])) if has_truth else None,
        "verdicts": [c["verdict"] for c in state["critiques"]],
        "critic_accuracy": sum(verdicts) / len(verdicts) if verdicts else None,
    }
    return EpisodeOutcome(reward=float(correct[-1]) if has_truth else None, summary=summary)


def _question(actor_prompt: Sequence[Message]) -> str | None:
    """The question of an actor prompt, read from its first message (``actor_messages``: the
    turns are logged without their task); None for a prompt of other wording."""
    first = actor_prompt[0] if actor_prompt else None
    ending = f"\n{ANSWER_FORMAT}"
    if first is None or first["role"] != "user" or not first["content"].endswith(ending):
        return None
    return first["content"].removesuffix(ending)


def review_of(actor_prompt: Sequence[Message], answer: str) -> list[Message] | None:
    """The critic's prompt reviewing an actor answer, as the game builds it with the arithmetic
    checker's notes (``ReflectionOptions.checker``, on by default); None for an actor prompt of
    other wording."""
    question = _question(actor_prompt)
    return None if question is None else critic_messages(question, answer, checker_notes(answer))


def rejected(actor_prompt: Sequence[Message], answer: str) -> list[Message] | None:
    """The actor's refinement prompt after its first answer ``answer`` was called incorrect by a
    critic that wrote the verdict line alone (a truth-trained critic's whole review), with the
    arithmetic checker's notes (``ReflectionOptions.checker``, on by default); None for a prompt
    that is not a first answer's."""
    question = _question(actor_prompt) if len(actor_prompt) == 1 else None
    if question is None:
        return None
    return refine_messages(question, answer, VERDICT_INCORRECT_LINE, checker_notes(answer))


def repaired(answer: str, truth: str) -> str | None:
    """A wrong answer with the results of its wrong written steps corrected (what the checker's
    notes in its rejection name), when that makes it right; None otherwise."""
    fixed = corrected(answer)
    return fixed if fixed is not None and is_correct(extract_answer(fixed), truth) else None


def with_answer_line(answer: str, truth: str) -> str:
    """A right answer ending with the line its prompt asks for (``ANSWER_FORMAT``): as it is when
    its last line is an "Answer:" line, else with "Answer: <truth>" added. The bundled model seldom
    writes that line; trained on answers without it, the actor learns no place where an answer
    stops and runs on into another, often wrong, step."""
    body = answer.rstrip()
    last = body.splitlines()[-1] if body else ""
    return answer if _ANSWER_LINE.search(last) else f"{body}\nAnswer: {truth}"


_ANSWER_LINE = re.compile(r"answer\s*[*_]*\s*:[^\n]*\S", re.IGNORECASE)
"""an "Answer: <value>" on a line, at its start or after the working ("... = 13 cars. Answer: 13")"""

# the critic's whole response when it answers with the verdict line alone, as constrained decoding writes it
VERDICT_CORRECT_LINE, VERDICT_INCORRECT_LINE = (VERDICT_LINE.prefix("") + option for option in VERDICT_LINE.options)



def practice_tasks(spec: str) -> str:
    """The generator's whole range practises on level 1, where a small model answers some
    problems right and some wrong (levels 2-4 give it almost no right answer to learn from)."""
    return "arithmetic:1" if spec == "arithmetic" else spec


GAME = GameSpec(
    name="math-reflection",
    description="An actor solves a math problem, a critic reviews it, the actor refines; judged on ground truth.",
    seats=SEATS,
    graph="graphs.math_reflection.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=ReflectionOptions,
    tasks=MATH_TASKS,
    bots=BOTS,
    rewards={
        CORRECT: "actor: its answer matches the ground truth (1/0, 0 when unparsed)",
        VERDICT_CORRECT: "critic: its verdict agrees with the truth about the answer it reviewed (1/0)",
    },
    credit={"critic": CRITIC_CREDIT},
    metrics=reflection_metrics,
    gate_metrics={  # never the critic's raw accuracy, which rewards saying "incorrect" to a weak actor
        "actor": GateMetric("pass@turn-1"),
        "critic": GateMetric("critic_balanced_accuracy",
                             "balanced accuracy needs the critic to review both right and wrong answers"),
    },
    first_prompt=lambda task: actor_messages(task.question),
    report_metrics=("pass@turn-1", "pass@final-turn", "majority@N", "refinement_gain", "critic_balanced_accuracy",
                    "critic_unparsed_rate"),
    # the actor's solo attempt: one answer, an approving scripted critic (no model call), so a
    # round buys several times more actor samples than full episodes would
    practice=Practice("actor", {"turns": 1}, {"critic": "always-correct"}, tasks=practice_tasks),
    balanced_seats=frozenset({"critic"}),
    truth_verdicts=TruthVerdicts("critic", "actor", review_of,
                                 {True: VERDICT_CORRECT_LINE, False: VERDICT_INCORRECT_LINE}),
    refinements=Refinements("actor", rejected, repaired, with_answer_line),
    revision=2,  # 2: the critic's review carries the arithmetic checker's notes
)
