"""The arithmetic generator's families: what a problem computes, apart from how it is worded.

A family is one shape of computation (``mul-sub``: a product, then a difference) at one
level. It draws the numbers of a problem and says its answer and the expression that gives
it; the frames (``arithmetic_frames``) are the sentences that dress those numbers up. The
number of steps is the number of operations in the expression.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

Numbers = dict[str, Any]
"""The slots a frame fills: numbers by letter, plus ``answer`` and ``expression``."""


@dataclass(frozen=True)
class Family:
    name: str
    level: int
    draw: Callable[[random.Random], Numbers]
    """numbers for one problem, with its ``answer`` and ``expression``"""

    @cached_property
    def steps(self) -> int:
        """How many operations its expression has (read once from a drawn problem)."""
        return len(re.findall(r" [-+*/] ", self.draw(random.Random(0))["expression"]))


def _add(rng: random.Random) -> Numbers:
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    return {"a": a, "b": b, "answer": a + b, "expression": f"{a} + {b}"}


def _sub(rng: random.Random) -> Numbers:
    a = rng.randint(5, 20)
    b = rng.randint(1, a - 1)
    return {"a": a, "b": b, "answer": a - b, "expression": f"{a} - {b}"}


def _mul(rng: random.Random) -> Numbers:
    a, b = rng.randint(2, 9), rng.randint(2, 10)
    return {"a": a, "b": b, "answer": a * b, "expression": f"{a} * {b}"}


def _div(rng: random.Random) -> Numbers:
    k, q = rng.randint(2, 9), rng.randint(2, 10)
    return {"total": k * q, "k": k, "answer": q, "expression": f"{k * q} / {k}"}


def _add_sub(rng: random.Random) -> Numbers:
    a, b = rng.randint(5, 50), rng.randint(2, 50)
    c = rng.randint(1, a + b - 1)
    return {"a": a, "b": b, "c": c, "answer": a + b - c, "expression": f"{a} + {b} - {c}"}


def _mul_add(rng: random.Random) -> Numbers:
    a, b, c = rng.randint(2, 9), rng.randint(2, 12), rng.randint(1, 30)
    return {"a": a, "b": b, "c": c, "answer": a * b + c, "expression": f"{a} * {b} + {c}"}


def _mul_sub(rng: random.Random) -> Numbers:
    a, b = rng.randint(2, 9), rng.randint(4, 12)
    c = rng.randint(1, a * b - 1)
    return {"a": a, "b": b, "c": c, "answer": a * b - c, "expression": f"{a} * {b} - {c}"}


def _sub_sub(rng: random.Random) -> Numbers:
    total = rng.randint(60, 200)
    a = rng.randint(10, total // 2)
    b = rng.randint(5, total - a - 1)
    return {"total": total, "a": a, "b": b, "answer": total - a - b, "expression": f"{total} - {a} - {b}"}


def _div_add(rng: random.Random) -> Numbers:
    k, q, c = rng.randint(2, 9), rng.randint(2, 12), rng.randint(1, 20)
    return {"total": k * q, "k": k, "c": c, "answer": q + c, "expression": f"{k * q} / {k} + {c}"}


def _two_products(rng: random.Random) -> Numbers:
    a, p, b, q = rng.randint(2, 9), rng.randint(2, 15), rng.randint(2, 9), rng.randint(1, 9)
    return {"a": a, "p": p, "b": b, "q": q, "answer": a * p + b * q, "expression": f"{a} * {p} + {b} * {q}"}


def _change(rng: random.Random) -> Numbers:
    numbers = _two_products(rng)
    bill = next(note for note in (50, 100, 200, 500) if note > numbers["answer"])
    a, p, b, q = (numbers[k] for k in "apbq")
    return {**numbers, "bill": bill, "answer": bill - numbers["answer"],
            "expression": f"{bill} - ({a} * {p} + {b} * {q})"}


def _mul_sub_add(rng: random.Random) -> Numbers:
    a, b = rng.randint(5, 20), rng.randint(5, 35)
    c, d = rng.randint(1, a * b // 4), rng.randint(2, 60)
    return {"a": a, "b": b, "c": c, "d": d, "answer": a * b - c + d, "expression": f"{a} * {b} - {c} + {d}"}


def _share_rest(rng: random.Random) -> Numbers:
    a, b, k = rng.randint(2, 9), rng.randint(4, 24), rng.randint(2, 7)
    each = rng.randint(1, (a * b - 1) // k)
    kept = a * b - k * each
    return {"a": a, "b": b, "k": k, "kept": kept, "answer": each, "expression": f"({a} * {b} - {kept}) / {k}"}


def _round_trip(rng: random.Random) -> Numbers:
    per_100, distance = rng.randint(4, 12), 50 * rng.randint(1, 12)
    return {"rate": per_100, "distance": distance, "answer": 2 * distance * per_100 // 100,
            "expression": f"2 * {distance} * {per_100} / 100"}


def _proportion(rng: random.Random) -> Numbers:
    unit, batch = rng.randint(5, 30), rng.randint(4, 24)
    wanted = rng.choice([n for n in range(2, 61) if n != batch])
    return {"whole": unit * batch, "batch": batch, "wanted": wanted, "answer": unit * wanted,
            "expression": f"{unit * batch} / {batch} * {wanted}"}


def _split_total(rng: random.Random) -> Numbers:
    people, each = rng.randint(2, 8), rng.randint(8, 40)
    total = people * each
    extra = rng.randint(2, total // 5)
    return {"people": people, "cost": total - extra, "extra": extra, "answer": each,
            "expression": f"({total - extra} + {extra}) / {people}"}


def _half_product(rng: random.Random) -> Numbers:
    rate, hours, days = 2 * rng.randint(5, 15), rng.randint(3, 9), rng.randint(2, 6)
    return {"rate": rate, "hours": hours, "days": days, "answer": rate * hours * days // 2,
            "expression": f"{rate} * {hours} * {days} / 2"}


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("add", 1, _add), Family("sub", 1, _sub), Family("mul", 1, _mul), Family("div", 1, _div),
    Family("compare", 1, _sub),
    Family("add-sub", 2, _add_sub), Family("mul-add", 2, _mul_add), Family("mul-sub", 2, _mul_sub),
    Family("sub-sub", 2, _sub_sub), Family("div-add", 2, _div_add),
    Family("two-products", 3, _two_products), Family("change", 3, _change), Family("mul-sub-add", 3, _mul_sub_add),
    Family("share-rest", 4, _share_rest), Family("round-trip", 4, _round_trip), Family("proportion", 4, _proportion),
    Family("split-total", 4, _split_total), Family("half-product", 4, _half_product),
)}
"""Every family by name. ``compare`` computes like ``sub`` but asks for a difference between two
amounts ("how many more"); it and ``div-add`` have no training frames: they are held out whole."""
