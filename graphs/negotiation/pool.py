"""A pool of items with each side's private values, its splits, and how good a deal is.

A split is written as what the proposer takes (a count per item type); the counterpart gets
the rest. Each side's values are private, but the judge knows both, so any agreement's value
to each side is computable, and enumerating every split of the pool gives the best Nash
product and the best joint value a deal could have reached.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

ITEMS = ("books", "hats", "balls")
NEGOTIATORS = ("proposer", "counterpart")

Bundle = tuple[int, ...]
"""a count per item type, in the pool's order"""


@dataclass(frozen=True)
class Pool:
    items: tuple[str, ...]
    counts: Bundle
    proposer_values: Bundle
    counterpart_values: Bundle
    """value of one item of each type, to each side"""

    def values(self, seat: str) -> Bundle:
        if seat not in NEGOTIATORS:
            raise KeyError(f"no values for seat {seat!r}; the negotiators are {', '.join(NEGOTIATORS)}")
        return self.proposer_values if seat == "proposer" else self.counterpart_values

    def worth(self, seat: str, bundle: Bundle) -> int:
        return sum(n * v for n, v in zip(bundle, self.values(seat), strict=True))

    def total(self, seat: str) -> int:
        """What the whole pool is worth to ``seat``."""
        return self.worth(seat, self.counts)

    def rest(self, take: Bundle) -> Bundle:
        """What the other side gets when one side takes ``take``."""
        return tuple(c - t for c, t in zip(self.counts, take, strict=True))

    def within(self, take: Bundle) -> bool:
        return len(take) == len(self.counts) and all(0 <= t <= c for t, c in zip(take, self.counts, strict=True))

    @cached_property
    def splits(self) -> tuple[Bundle, ...]:
        """Every split of the pool, as the proposer's take."""
        return tuple(itertools.product(*(range(c + 1) for c in self.counts)))

    def describe(self, bundle: Bundle) -> str:
        """ "books=1 hats=0 balls=2" """
        return " ".join(f"{item}={n}" for item, n in zip(self.items, bundle, strict=True))

    @cached_property
    def best_nash(self) -> int:
        """The largest product of the two sides' values over every split (disagreement: 0, 0)."""
        return max(self.worth("proposer", s) * self.worth("counterpart", self.rest(s)) for s in self.splits)

    @cached_property
    def best_joint(self) -> int:
        """The largest sum of the two sides' values over every split (reached by a Pareto-optimal one)."""
        return max(self.worth("proposer", s) + self.worth("counterpart", self.rest(s)) for s in self.splits)

    def to_meta(self) -> dict[str, Any]:
        return {"items": list(self.items), "counts": list(self.counts),
                "values": {"proposer": list(self.proposer_values), "counterpart": list(self.counterpart_values)}}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> Pool:
        try:
            values = meta["values"]
            return cls(tuple(meta["items"]), tuple(meta["counts"]), tuple(values["proposer"]),
                       tuple(values["counterpart"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"the task is not a negotiation pool (its meta lacks {exc}); play negotiation on its "
                             "own tasks ('negotiation' or a pool file, see `sparring games`)") from exc


@dataclass(frozen=True)
class DealScores:
    """How good an outcome is (no deal: every figure 0)."""

    proposer_take: Bundle | None
    """None: no deal"""
    worth: dict[str, int]
    """seat -> what its share is worth to it"""
    share: dict[str, float]
    """seat -> worth / what the whole pool is worth to it"""
    nash_ratio: float
    """the deal's Nash product over the best achievable one"""
    pareto_share: float
    """the deal's joint value over the best joint value (that of a Pareto-optimal split)"""
    pareto_optimal: bool
    """no other split is at least as good for both sides and better for one"""


def score_deal(pool: Pool, proposer_take: Bundle | None) -> DealScores:
    if proposer_take is None:
        zero = dict.fromkeys(NEGOTIATORS, 0)
        return DealScores(None, zero, dict.fromkeys(NEGOTIATORS, 0.0), 0.0, 0.0, False)
    bundles = {"proposer": proposer_take, "counterpart": pool.rest(proposer_take)}
    worth = {seat: pool.worth(seat, bundles[seat]) for seat in NEGOTIATORS}
    dominated = any(
        (p := pool.worth("proposer", s)) >= worth["proposer"]
        and (c := pool.worth("counterpart", pool.rest(s))) >= worth["counterpart"]
        and (p, c) != (worth["proposer"], worth["counterpart"])
        for s in pool.splits
    )
    return DealScores(
        proposer_take=proposer_take,
        worth=worth,
        share={seat: worth[seat] / pool.total(seat) for seat in NEGOTIATORS},
        nash_ratio=worth["proposer"] * worth["counterpart"] / pool.best_nash,
        pareto_share=(worth["proposer"] + worth["counterpart"]) / pool.best_joint,
        pareto_optimal=not dominated,
    )


@dataclass(frozen=True)
class Move:
    """A parsed move line: a proposal (what the speaker takes) or an acceptance."""

    take: Bundle | None
    """None: Accept"""

    @property
    def accept(self) -> bool:
        return self.take is None

    def line(self, pool: Pool) -> str:
        """The canonical text of the move, as the constrained move line writes it."""
        return "Accept" if self.take is None else f"Propose {pool.describe(self.take)}"


_PROPOSE = re.compile(r"propose\s*:?\s*((?:[a-z]+\s*=\s*\d+[\s,;]*)+)", re.IGNORECASE)
_PAIR = re.compile(r"([a-z]+)\s*=\s*(\d+)", re.IGNORECASE)
_ACCEPT = re.compile(r"(?:move\s*:\s*|^[\s*_>#-]*)accept\b", re.IGNORECASE | re.MULTILINE)


def parse_move(text: str, pool: Pool) -> Move | None:
    """The last move in ``text``: "Move: Propose books=1 hats=0 balls=2" (also "Propose:
    books=1, hats=0, balls=2", items in any order; counts outside the pool are parsed, and
    judged invalid) or "Move: Accept" (also "Accept" at the start of a line, not "I cannot
    accept" in prose). None when there is no move, or a proposal that does not name each item
    type of the pool exactly once."""
    proposals = list(_PROPOSE.finditer(text))
    accepts = list(_ACCEPT.finditer(text))
    last_proposal = proposals[-1] if proposals else None
    if accepts and (last_proposal is None or accepts[-1].start() > last_proposal.start()):
        return Move(None)
    if last_proposal is None:
        return None
    pairs = [(name.lower(), int(count)) for name, count in _PAIR.findall(last_proposal.group(1))]
    named = dict(pairs)
    if len(named) != len(pairs) or set(named) != set(pool.items):
        return None
    return Move(tuple(named[item] for item in pool.items))
