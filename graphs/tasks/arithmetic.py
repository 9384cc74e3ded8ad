"""A built-in generator of arithmetic word problems with integer answers, at four levels.

Level 1: one operation on small numbers (adding, taking away, comparing, multiplying,
sharing). Level 2: two operations. Level 3: three or more operations on larger numbers.
Level 4: multi-step problems with multiplication and division.

A problem is a family's numbers (``arithmetic_families``: what is computed) in a frame's
words (``arithmetic_frames``: how it is asked), with a name, an item and sometimes a number
the question does not need. Frames belong to one of three groups, and the splits follow
them:

* ``train``: problems in training frames whose question text hashes outside the held-out
  fifth; practice and training episodes play these.
* ``heldout``: problems in the same training frames, with other numbers (the hashed fifth):
  a test of the same wordings.
* ``dev``: problems in frames kept for choices; never trained on, never a reported result.
* ``unseen``: problems in frames no training episode and no choice has seen (the
  template-held-out split), including families held out whole: whether a skill carries
  over to other wordings.

Every problem is a pure function of (split group, level, candidate number), so the sequence
is the same on every machine; the same question text can never land in two splits, and
repeats within a split are skipped. Task ``arith-unseen-L2-000017`` is the 18th distinct
level-2 problem of the ``unseen`` split.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterator
from itertools import count

from graphs.tasks.arithmetic_families import FAMILIES, Family
from graphs.tasks.arithmetic_frames import FRAMES, Frame, Group
from graphs.tasks.base import Task, TaskSourceError

SPLITS = ("train", "heldout", "dev", "unseen")
GROUP_OF_SPLIT: dict[str, Group] = {"train": "train", "heldout": "train", "dev": "dev", "unseen": "unseen"}
LEVELS = (1, 2, 3, 4)
HELDOUT_PERCENT = 20
SOURCE = "arithmetic"

NAMES = (
    "Ava", "Ben", "Chloe", "Diego", "Emma", "Farah", "Gus", "Hana", "Ivan", "Jia", "Kofi", "Lena",
    "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Victor", "Wen",
    "Yusuf", "Zoe", "Amara", "Bruno", "Carmen", "Dmitri", "Elif", "Felix", "Grace", "Hugo", "Ines",
    "Jonas", "Keiko", "Luis", "Maya", "Nikhil", "Olga",
)  # fmt: skip
ITEMS = (
    "apples", "pencils", "stickers", "marbles", "cookies", "books", "oranges", "stamps", "cards",
    "balloons", "shells", "candles", "buttons", "crayons", "coins", "beads", "postcards", "toy cars",
)  # fmt: skip


def frames_of(level: int, group: Group) -> dict[Family, list[Frame]]:
    """The frames of one level and group, by family (families in the order FAMILIES lists them)."""
    found: dict[Family, list[Frame]] = {}
    for frame in FRAMES:
        family = FAMILIES[frame.family]
        if family.level == level and frame.group == group:
            found.setdefault(family, []).append(frame)
    return found


def _problem(frame: Frame, family: Family, rng: random.Random) -> tuple[str, dict[str, object]]:
    """The question a frame asks of freshly drawn numbers, and the family's numbers."""
    numbers = family.draw(rng)
    name, friend = rng.sample(NAMES, 2)
    question = frame.text.format(**numbers, name=name, friend=friend, item=rng.choice(ITEMS), x=rng.randint(6, 60))
    return question, numbers


def split_of(question: str) -> str:
    """The split a question belongs to, from a hash of its text."""
    bucket = int.from_bytes(hashlib.blake2b(question.encode(), digest_size=8).digest(), "little") % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"


def problems(split: str, level: int) -> Iterator[Task]:
    """The endless, deterministic sequence of distinct problems of one split and level: each
    candidate draws a family of the split's frame group, then one of its frames, so the
    families of a level come in about equal numbers."""
    if split not in SPLITS:
        raise TaskSourceError(f"unknown arithmetic split {split!r}; use one of: {', '.join(SPLITS)}")
    if level not in LEVELS:
        raise TaskSourceError(f"unknown arithmetic level {level}; levels are {LEVELS[0]}-{LEVELS[-1]}")
    group = GROUP_OF_SPLIT[split]
    by_family = frames_of(level, group)
    families = list(by_family)
    seen: set[str] = set()
    index = 0
    for candidate in count():
        rng = random.Random(f"{SOURCE}:{group}:L{level}:{candidate}")
        family = rng.choice(families)
        frame = rng.choice(by_family[family])
        question, numbers = _problem(frame, family, rng)
        if question in seen or (group == "train" and split_of(question) != split):
            continue
        seen.add(question)
        yield Task(
            id=f"arith-{split}-L{level}-{index:06d}",
            question=question,
            answer=str(numbers["answer"]),
            source=SOURCE,
            split=split,
            difficulty=f"L{level}",
            meta={"level": level, "family": family.name, "steps": family.steps, "template": frame.id,
                  "expression": numbers["expression"]},
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
