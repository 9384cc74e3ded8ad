"""The fixed prompts of math-reflection.

Accuracy depends heavily on the prompt (3x on the bundled model between two reasonable
wordings), so before/after comparisons are only valid while these strings stay unchanged.
"""

from __future__ import annotations

from graphs.policies.base import Message
from graphs.policies.final_line import FinalChoice

ANSWER_FORMAT = "Give the final answer as 'Answer: <number>'."

CRITIC_INSTRUCTIONS = (
    "Check the proposed solution step by step. Point out any mistake in one or two sentences, "
    "then end with 'Verdict: correct' or 'Verdict: incorrect'."
)

VERDICT_LINE = FinalChoice("Verdict:", (" correct", " incorrect"))
"""The critic's last line, chosen by constrained decoding after its critique (the line the
instructions ask for; options carry their space so they tokenize as written after "Verdict:")."""


def actor_messages(question: str) -> list[Message]:
    return [{"role": "user", "content": f"{question}\n{ANSWER_FORMAT}"}]


def refine_messages(question: str, previous_answer: str, critique: str, notes: str | None = None) -> list[Message]:
    """The actor's first prompt, its previous response, and the critique as the next user turn,
    with the arithmetic checker's notes on the previous answer after it when it found a wrong step
    (``ReflectionOptions.checker``)."""
    checked = f"A calculator checked the arithmetic of your answer: {notes}\n\n" if notes else ""
    return [
        *actor_messages(question),
        {"role": "assistant", "content": previous_answer},
        {
            "role": "user",
            "content": f"A reviewer checked your answer and wrote:\n\n{critique}\n\n{checked}"
            f"Solve the problem again, fixing any mistake. {ANSWER_FORMAT}",
        },
    ]


def critic_messages(question: str, answer: str, notes: str | None = None) -> list[Message]:
    """The critic's review of one answer, with the arithmetic checker's notes on it before the
    instructions when it found a wrong step (``ReflectionOptions.checker``)."""
    checked = f"A calculator checked the arithmetic of the solution: {notes}\n\n" if notes else ""
    return [
        {
            "role": "user",
            "content": f"Problem:\n{question}\n\nProposed solution:\n{answer}\n\n{checked}{CRITIC_INSTRUCTIONS}",
        }
    ]
