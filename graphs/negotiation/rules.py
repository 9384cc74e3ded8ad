"""The rules of a move: which offer stands, whether a move is valid, whether it is coherent.

A proposal stands until it is countered: the standing offer to a seat is the latest valid
proposal of the game when the other side made it. A move is *valid* when it has a move line,
a proposal takes no more of an item than the pool has, and an Accept answers a standing offer.
A valid move is *coherent* unless it contradicts the speaker's own earlier moves:

- it asks for more (by its own values) than its previous proposal: a concession taken back;
- it turns down a standing offer to propose a split worth less to itself than that offer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from graphs.negotiation.pool import Bundle, Move, Pool
from graphs.negotiation.state import MoveRecord

NO_MOVE = "no move line (end with 'Move: Propose ...' or 'Move: Accept')"


def standing_offer(moves: Sequence[MoveRecord], seat: str) -> MoveRecord | None:
    """The other side's proposal that ``seat`` may accept now, if any."""
    latest = next((m for m in reversed(moves) if m["valid"] and m["take"] is not None), None)
    return latest if latest is not None and latest["seat"] != seat else None


def offered_to(pool: Pool, offer: MoveRecord) -> Bundle:
    """What the seat an offer is made to gets if it accepts."""
    assert offer["take"] is not None
    return pool.rest(tuple(offer["take"]))


@dataclass(frozen=True)
class Check:
    valid: bool
    coherent: bool
    problem: str | None = None


def check_move(pool: Pool, seat: str, move: Move | None, before: Sequence[MoveRecord]) -> Check:
    """Judge one move of ``seat`` given the moves ``before`` it."""
    offer = standing_offer(before, seat)
    if move is None:
        return Check(False, False, NO_MOVE)
    if move.take is None:
        if offer is None:
            return Check(False, False, "accepts, but no proposal of the other side is standing")
        return Check(True, True)
    if not pool.within(move.take):
        return Check(False, False, f"asks for {pool.describe(move.take)}, beyond the pool "
                                   f"({pool.describe(pool.counts)})")
    asks = pool.worth(seat, move.take)
    previous = next((m for m in reversed(before) if m["seat"] == seat and m["valid"] and m["take"] is not None), None)
    if previous is not None and asks > (asked := pool.worth(seat, tuple(previous["take"]))):
        return Check(True, False, f"asks for more (worth {asks} to it) than in its previous proposal "
                                  f"(worth {asked}): a concession taken back")
    if offer is not None and asks < (offered := pool.worth(seat, offered_to(pool, offer))):
        return Check(True, False, f"turns down an offer worth {offered} to it and asks for less (worth {asks})")
    return Check(True, True)
