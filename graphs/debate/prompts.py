"""The fixed prompts of the debate game."""

from __future__ import annotations

from graphs.debate.state import LABELS, Argument
from graphs.policies.base import Message

FIRST_ROUND = "Give your answer and the argument for it. End with 'Answer: <your answer>'."
LATER_ROUND = (
    "Reply to the other debater's argument. Keep your answer, or change it if you now think it is "
    "wrong, and end with 'Answer: <your answer>'."
)
JUDGE_INSTRUCTIONS = (
    "Decide which debater's final answer is correct. Write a one-paragraph rationale, then end "
    "with 'Winner: A' or 'Winner: B'."
)


def _intro(question: str, seat: str) -> str:
    return (
        f"You are Debater {LABELS[seat]} in a debate with one other debater. Each of you answers the "
        f"question below and argues for your answer; a judge then decides who is right.\n\n"
        f"Question: {question}"
    )


def debater_messages(question: str, seat: str, arguments: list[Argument]) -> list[Message]:
    """The debater's conversation: its own turns as assistant messages, everything else
    (the question, the other side's arguments, the round's instruction) as user messages,
    exactly as it saw them when it spoke before."""
    messages: list[Message] = []
    pending = [_intro(question, seat)]
    own_rounds = 0
    for argument in arguments:
        if argument["seat"] == seat:
            pending.append(FIRST_ROUND if own_rounds == 0 else LATER_ROUND)
            messages.append({"role": "user", "content": "\n\n".join(pending)})
            messages.append({"role": "assistant", "content": argument["text"]})
            pending, own_rounds = [], own_rounds + 1
        else:
            pending.append(f"Debater {LABELS[argument['seat']]}:\n{argument['text']}")
    pending.append(FIRST_ROUND if own_rounds == 0 else LATER_ROUND)
    messages.append({"role": "user", "content": "\n\n".join(pending)})
    return messages


def judge_messages(question: str, arguments: list[Argument]) -> list[Message]:
    transcript = "\n\n".join(f"Debater {LABELS[a['seat']]} (round {a['round'] + 1}):\n{a['text']}" for a in arguments)
    return [
        {
            "role": "user",
            "content": f"You are the judge of a debate.\n\nQuestion: {question}\n\n"
            f"Transcript:\n\n{transcript}\n\n{JUDGE_INSTRUCTIONS}",
        }
    ]
