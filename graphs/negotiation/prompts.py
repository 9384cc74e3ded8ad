"""The fixed prompts of negotiation, and the constrained move line.

Each negotiator sees its own moves as assistant messages and everything else (the rules, the
pool and its own values, the other side's messages, the offer standing and the moves left) as
user messages, exactly as it saw them before. The lines a scripted bot reads (``bots.py``)
are "Pool:", "Your values:", "Standing offer to you:" and "Moves left:".
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.negotiation.pool import Pool
from graphs.negotiation.rules import offered_to, standing_offer
from graphs.negotiation.state import MoveRecord
from graphs.policies.base import Message
from graphs.policies.final_line import FinalChoice

MARKER = "Move:"
LABELS = {"proposer": "Agent A", "counterpart": "Agent B"}


def move_line(pool: Pool, *, can_accept: bool) -> FinalChoice:
    """The final line of a constrained move: every split of the pool, and Accept when an offer stands."""
    proposals = tuple(f" Propose {pool.describe(take)}" for take in pool.splits)
    return FinalChoice(MARKER, ((" Accept",) if can_accept else ()) + proposals)


def _yours(moves_left: int) -> int:
    """How many of the next ``moves_left`` moves are the next mover's."""
    return (moves_left + 1) // 2


def _intro(pool: Pool, seat: str, max_turns: int) -> str:
    mine = _yours(max_turns) if seat == "proposer" else max_turns // 2
    template = " ".join(f"{item}=<number>" for item in pool.items)
    return (
        "You are negotiating with another agent over how to split a pool of items. You each value the items "
        "differently, and neither of you knows the other's values.\n\n"
        f"Pool: {pool.describe(pool.counts)}\n"
        f"Your values: {pool.describe(pool.values(seat))} (the whole pool is worth {pool.total(seat)} to you)\n\n"
        f"You take turns; there are {max_turns} moves in all, {mine} of them yours. If no proposal is accepted by "
        "then, neither of you gets anything. On your move, write a short message to the other agent, then end "
        "with one line:\n"
        f"{MARKER} Propose {template}   (the items you take; the other agent gets the rest)\n"
        f"{MARKER} Accept   (agree to the other agent's standing proposal)"
    )


def _situation(pool: Pool, seat: str, before: Sequence[MoveRecord], max_turns: int) -> str:
    """What the seat is told before it moves: the offer standing to it and the moves left."""
    lines = []
    own = [m for m in before if m["seat"] == seat]
    if own and not own[-1]["valid"]:
        lines.append(f"Your last move was not valid: it {own[-1]['problem']}.")
    offer = standing_offer(before, seat)
    if offer is not None:
        bundle = offered_to(pool, offer)
        lines.append(f"Standing offer to you: {pool.describe(bundle)} (worth {pool.worth(seat, bundle)} to you)")
    elif before:
        lines.append("No proposal of the other agent is standing.")
    else:
        lines.append("You move first: no proposal is on the table yet.")
    left = max_turns - len(before)
    lines.append(f"Moves left: {left} ({_yours(left)} of them yours)")
    return "\n".join(lines)


def negotiator_messages(pool: Pool, seat: str, moves: Sequence[MoveRecord], max_turns: int) -> list[Message]:
    """The conversation ``seat`` moves after, given every move so far."""
    messages: list[Message] = []
    pending = [_intro(pool, seat, max_turns)]
    for i, move in enumerate(moves):
        if move["seat"] == seat:
            pending.append(_situation(pool, seat, moves[:i], max_turns))
            messages.append({"role": "user", "content": "\n\n".join(pending)})
            messages.append({"role": "assistant", "content": move["text"]})
            pending = []
        else:
            pending.append(f"The other agent wrote:\n{move['text']}")
    pending.append(_situation(pool, seat, moves, max_turns))
    messages.append({"role": "user", "content": "\n\n".join(pending)})
    return messages


def judge_material(pool: Pool, moves: Sequence[MoveRecord], outcome: str) -> str:
    """What a judge model reads to score the proposer's coherence: the pool, both sides' values
    (the judge sees what the agents do not), the transcript and how it ended."""
    transcript = "\n\n".join(f"{LABELS[m['seat']]} (move {i + 1}):\n{m['text']}" for i, m in enumerate(moves))
    return (
        f"Two agents negotiated over a pool of items. A proposal names the items its speaker takes.\n\n"
        f"Pool: {pool.describe(pool.counts)}\n"
        f"Agent A's private values: {pool.describe(pool.proposer_values)}\n"
        f"Agent B's private values: {pool.describe(pool.counterpart_values)}\n\n"
        f"Transcript:\n\n{transcript}\n\nOutcome: {outcome}"
    )
