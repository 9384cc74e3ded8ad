"""A built-in generator of arithmetic word problems with integer answers, at four levels.

Level 1: one operation on small numbers. Level 2: two operations. Level 3: three or more
operations on larger numbers. Level 4: multi-step problems with multiplication and division.

Every problem is a pure function of (level, candidate number), so the sequence is the same on
every machine. A candidate belongs to the ``heldout`` split when a hash of its question text
falls in the held-out fifth, else to ``train``: the same question text can never land in both
splits, and repeats within a split are skipped. Task ``arith-heldout-L2-000017`` is the 18th
distinct level-2 held-out problem.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count

from graphs.tasks.base import Task, TaskSourceError

SPLITS = ("train", "heldout")
LEVELS = (1, 2, 3, 4)
HELDOUT_PERCENT = 20
SOURCE = "arithmetic"

NAMES = (
    "Ava", "Ben", "Chloe", "Diego", "Emma", "Farah", "Gus", "Hana", "Ivan", "Jia", "Kofi", "Lena",
    "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Victor", "Wen",
    "Yusuf", "Zoe",
)  # fmt: skip
ITEMS = (
    "apples", "pencils", "stickers", "marbles", "cookies", "books", "oranges", "stamps", "cards",
    "balloons", "shells", "candles",
)  # fmt: skip


@dataclass(frozen=True)
class Problem:
    question: str
    answer: int
    expression: str
    """The computation that gives the answer, e.g. "(4 * 12 - 8) / 5"."""


Template = Callable[[random.Random], Problem]


def _two_names(rng: random.Random) -> tuple[str, str]:
    first, second = rng.sample(NAMES, 2)
    return first, second


# --- level 1: one operation, numbers up to 20 ----------------------------------------------


def _buy_more(rng: random.Random) -> Problem:
    name, item, a, b = rng.choice(NAMES), rng.choice(ITEMS), rng.randint(2, 20), rng.randint(2, 20)
    return Problem(
        f"{name} buys {a} {item} in the morning and {b} more in the afternoon. How many {item} does {name} buy in all?",
        a + b,
        f"{a} + {b}",
    )


def _give_away(rng: random.Random) -> Problem:
    (name, friend), item = _two_names(rng), rng.choice(ITEMS)
    a = rng.randint(5, 20)
    b = rng.randint(1, a - 1)
    return Problem(
        f"{name} has {a} {item} and gives {b} of them to {friend}. How many {item} does {name} have left?",
        a - b,
        f"{a} - {b}",
    )


def _bus_boards(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    return Problem(
        f"A bus has {a} passengers. At the next stop, {b} more people get on. How many passengers are on the bus now?",
        a + b,
        f"{a} + {b}",
    )


def _train_stop(rng: random.Random) -> Problem:
    a = rng.randint(5, 20)
    b = rng.randint(1, a - 1)
    return Problem(
        f"A train leaves the station with {a} passengers. At the first stop, {b} passengers get off "
        "and nobody gets on. How many passengers are still on the train?",
        a - b,
        f"{a} - {b}",
    )


def _pages_read(rng: random.Random) -> Problem:
    name, a, b = rng.choice(NAMES), rng.randint(2, 20), rng.randint(2, 20)
    return Problem(
        f"{name} reads {a} pages on Monday and {b} pages on Tuesday. How many pages does {name} read in the two days?",
        a + b,
        f"{a} + {b}",
    )


def _muffins_eaten(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    a = rng.randint(5, 20)
    b = rng.randint(1, a - 1)
    return Problem(
        f"{name} bakes {a} muffins and the family eats {b} of them. How many muffins are left?",
        a - b,
        f"{a} - {b}",
    )


# --- level 2: two operations, numbers up to about 200 --------------------------------------


def _buy_then_give(rng: random.Random) -> Problem:
    (name, friend), item = _two_names(rng), rng.choice(ITEMS)
    a, b = rng.randint(5, 50), rng.randint(2, 50)
    c = rng.randint(1, a + b - 1)
    return Problem(
        f"{name} has {a} {item}. {name} buys {b} more, then gives {c} to {friend}. "
        f"How many {item} does {name} have now?",
        a + b - c,
        f"{a} + {b} - {c}",
    )


def _packs(rng: random.Random) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(2, 9), rng.randint(2, 12), rng.randint(1, 30)
    return Problem(
        f"{name} buys {a} packs of {item} with {b} {item} in each pack. {name} already had {c} {item}. "
        f"How many {item} does {name} have now?",
        a * b + c,
        f"{a} * {b} + {c}",
    )


def _trip_left(rng: random.Random) -> Problem:
    name, friend = _two_names(rng)
    total = rng.randint(60, 200)
    a = rng.randint(10, total // 2)
    b = rng.randint(5, total - a - 1)
    return Problem(
        f"{name} is driving {total} km to visit {friend}. {name} drives {a} km before lunch and {b} km "
        "after lunch. How many km are left to drive?",
        total - a - b,
        f"{total} - {a} - {b}",
    )


def _trays_sold(rng: random.Random) -> Problem:
    a, b = rng.randint(2, 9), rng.randint(4, 12)
    c = rng.randint(1, a * b - 1)
    return Problem(
        f"A baker fills {a} trays with {b} rolls each and sells {c} rolls. How many rolls are left?",
        a * b - c,
        f"{a} * {b} - {c}",
    )


def _wallet(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    a = rng.randint(20, 100)
    b = rng.randint(1, a // 2)
    c = rng.randint(1, a - b - 1)
    return Problem(
        f"{name} has ${a}. {name} spends ${b} on lunch and ${c} on a book. How many dollars does {name} have left?",
        a - b - c,
        f"{a} - {b} - {c}",
    )


# --- level 3: three or more operations, larger numbers -------------------------------------


def _change(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    a, p, b, q = rng.randint(2, 9), rng.randint(2, 15), rng.randint(2, 9), rng.randint(1, 5)
    cost = a * p + b * q
    bill = next(note for note in (50, 100, 200) if note > cost)
    return Problem(
        f"{name} buys {a} notebooks at ${p} each and {b} pens at ${q} each, and pays with a ${bill} bill. "
        f"How many dollars of change does {name} get?",
        bill - cost,
        f"{bill} - ({a} * {p} + {b} * {q})",
    )


def _two_speeds(rng: random.Random) -> Problem:
    s1, h1, s2, h2 = rng.randint(40, 120), rng.randint(2, 6), rng.randint(40, 120), rng.randint(2, 6)
    return Problem(
        f"A train travels at {s1} km per hour for {h1} hours, then at {s2} km per hour for {h2} hours. "
        "How many kilometres does it travel in total?",
        s1 * h1 + s2 * h2,
        f"{s1} * {h1} + {s2} * {h2}",
    )


def _assembly(rng: random.Random) -> Problem:
    a, b = rng.randint(5, 20), rng.randint(18, 35)
    c, d = rng.randint(1, a * b // 4), rng.randint(2, 60)
    return Problem(
        f"A school has {a} classes with {b} students in each class. On Friday, {c} students are absent "
        f"and {d} visitors join the assembly. How many people are at the assembly?",
        a * b - c + d,
        f"{a} * {b} - {c} + {d}",
    )


def _savings(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    w, d = rng.randint(5, 40), rng.randint(4, 20)
    s, g = rng.randint(1, w * d - 1), rng.randint(5, 100)
    return Problem(
        f"{name} saves ${w} a week for {d} weeks, spends ${s} on a bike, and then gets ${g} as a gift. "
        f"How many dollars does {name} have now?",
        w * d - s + g,
        f"{w} * {d} - {s} + {g}",
    )


# --- level 4: multi-step with multiplication and division ----------------------------------


def _share_boxes(rng: random.Random) -> Problem:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, k = rng.randint(2, 9), rng.randint(4, 24), rng.randint(2, 7)
    each = rng.randint(1, (a * b - 1) // k)
    kept = a * b - k * each
    return Problem(
        f"{name} buys {a} boxes of {item} with {b} {item} in each box. {name} keeps {kept} and shares "
        f"the rest equally among {k} friends. How many {item} does each friend get?",
        each,
        f"({a} * {b} - {kept}) / {k}",
    )


def _fuel(rng: random.Random) -> Problem:
    per_100, halves = rng.randint(4, 12), rng.randint(1, 12)
    distance = 50 * halves
    return Problem(
        f"A car uses {per_100} litres of fuel for every 100 km. How many litres does it need for a round "
        f"trip to a town {distance} km away?",
        2 * distance * per_100 // 100,
        f"2 * {distance} * {per_100} / 100",
    )


def _recipe(rng: random.Random) -> Problem:
    per_cookie, batch = rng.randint(5, 30), rng.randint(4, 24)
    wanted = rng.choice([n for n in range(2, 61) if n != batch])
    return Problem(
        f"A recipe uses {per_cookie * batch} grams of flour to make {batch} cookies. "
        f"How many grams of flour are needed for {wanted} cookies?",
        per_cookie * wanted,
        f"{per_cookie * batch} / {batch} * {wanted}",
    )


def _split_bill(rng: random.Random) -> Problem:
    friends, each = rng.randint(2, 8), rng.randint(8, 40)
    total = friends * each
    tip = rng.randint(2, total // 5)
    return Problem(
        f"{friends} friends eat at a restaurant. The meal costs ${total - tip} and they leave a ${tip} tip. "
        "They split the total equally. How many dollars does each friend pay?",
        each,
        f"({total - tip} + {tip}) / {friends}",
    )


def _wages_rent(rng: random.Random) -> Problem:
    name = rng.choice(NAMES)
    wage, hours, days = 2 * rng.randint(5, 15), rng.randint(3, 9), rng.randint(2, 6)
    return Problem(
        f"{name} earns ${wage} per hour, works {hours} hours a day for {days} days, and then spends half "
        f"of the money on rent. How many dollars does {name} have left?",
        wage * hours * days // 2,
        f"{wage} * {hours} * {days} / 2",
    )


TEMPLATES: dict[int, tuple[Template, ...]] = {
    1: (_buy_more, _give_away, _bus_boards, _train_stop, _pages_read, _muffins_eaten),
    2: (_buy_then_give, _packs, _trip_left, _trays_sold, _wallet),
    3: (_change, _two_speeds, _assembly, _savings),
    4: (_share_boxes, _fuel, _recipe, _split_bill, _wages_rent),
}


def split_of(question: str) -> str:
    """The split a question belongs to, from a hash of its text."""
    bucket = int.from_bytes(hashlib.blake2b(question.encode(), digest_size=8).digest(), "little") % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"


def problems(split: str, level: int) -> Iterator[Task]:
    """The endless, deterministic sequence of distinct problems of one split and level."""
    if split not in SPLITS:
        raise TaskSourceError(f"unknown arithmetic split {split!r}; use one of: {', '.join(SPLITS)}")
    if level not in TEMPLATES:
        raise TaskSourceError(f"unknown arithmetic level {level}; levels are {LEVELS[0]}-{LEVELS[-1]}")
    seen: set[str] = set()
    index = 0
    for candidate in count():
        rng = random.Random(f"{SOURCE}:L{level}:{candidate}")
        template = rng.choice(TEMPLATES[level])
        problem = template(rng)
        if problem.question in seen or split_of(problem.question) != split:
            continue
        seen.add(problem.question)
        yield Task(
            id=f"arith-{split}-L{level}-{index:06d}",
            question=problem.question,
            answer=str(problem.answer),
            source=SOURCE,
            split=split,
            difficulty=f"L{level}",
            meta={"level": level, "template": template.__name__.lstrip("_"), "expression": problem.expression},
        )
        index += 1


def generate(split: str, levels: tuple[int, ...], n: int) -> list[Task]:
    """The first problems of each level, taken in turn (L1, L2, ... L1, L2 ...) until n."""
    streams = [problems(split, level) for level in levels]
    return [next(streams[i % len(streams)]) for i in range(n)]


def parse_levels(text: str) -> tuple[int, ...]:
    """ "2" -> (2,), "1-3" -> (1, 2, 3)."""
    match = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    first, last = (int(match[1]), int(match[2] or match[1])) if match else (0, 0)
    if not (LEVELS[0] <= first <= last <= LEVELS[-1]):
        raise TaskSourceError(
            f"bad arithmetic levels {text!r}: write one level or a range within "
            f"{LEVELS[0]}-{LEVELS[-1]}, e.g. 'arithmetic:2' or 'arithmetic:1-3'"
        )
    return tuple(range(first, last + 1))
