"""The fixed prompts of the discussion game.

An agent's conversation holds its own earlier answers as assistant messages; each later round
is one user message with the other agents' previous answers and the problem restated last (a
small model attends best to what it read last, and a scripted calculator reads the last sum of
the message). Accuracy depends heavily on these strings: compare runs only while they stay.
"""

from __future__ import annotations

from graphs.discussion.state import Answer
from graphs.policies.base import Message

ANSWER_FORMAT = "Give the final answer as 'Answer: <number>'."


def label(seat: str) -> str:
    """agent_2 -> Agent 2"""
    return seat.replace("agent_", "Agent ")


def first_messages(question: str) -> list[Message]:
    return [{"role": "user", "content": f"{question}\n{ANSWER_FORMAT}"}]


def later_round(question: str, others: list[Answer]) -> str:
    shown = "\n\n".join(f"{label(a['seat'])} answered:\n{a['text']}" for a in others)
    return (
        f"The other agents answered the same problem:\n\n{shown}\n\n"
        "Use their answers as extra information: find any mistake, in theirs or in yours, and solve the "
        f"problem again.\nThe problem: {question}\n{ANSWER_FORMAT}"
    )


def agent_messages(question: str, seat: str, answers: list[Answer], round_: int) -> list[Message]:
    """What ``seat`` reads before answering in ``round_``: the problem, then for each earlier
    round its own answer and the round after it (the others' answers of that round)."""
    own = {a["round"]: a for a in answers if a["seat"] == seat}
    messages = first_messages(question)
    for earlier in range(round_):
        others = [a for a in answers if a["round"] == earlier and a["seat"] != seat]
        messages.append({"role": "assistant", "content": own[earlier]["text"]})
        messages.append({"role": "user", "content": later_round(question, others)})
    return messages
