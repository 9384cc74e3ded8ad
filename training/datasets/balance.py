"""Checked answers balanced between correct and incorrect at each difficulty, so that rows
cannot teach difficulty instead of truth (reward-model rows, truth-verdict rows).

Each answer has a rank, ``sha256(f"{seed}:{turn_id}")``: choices by rank are deterministic for a
seed and independent of the order the answers were read in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CheckedAnswer:
    difficulty: str | None
    """its episode's difficulty level (None is a level of its own)"""
    correct: bool
    rank: str


def answer_rank(seed: int, turn_id: str) -> str:
    return hashlib.sha256(f"{seed}:{turn_id}".encode()).hexdigest()


def balanced_pairs(answers: Sequence[CheckedAnswer],
                   groups: Sequence[Hashable] | None = None) -> list[tuple[int, int]]:
    """(index of a correct answer, index of an incorrect one) of the same group (by default the
    same difficulty; ``groups``: each answer's group): in each group, the correct and the
    incorrect answers matched in rank order, as many pairs as the rarer of the two has answers
    (the others are left out). Groups in order of first appearance, pairs in rank order within
    a group."""
    levels: dict[Hashable, tuple[list[int], list[int]]] = {}
    for i, answer in enumerate(answers):
        group = answer.difficulty if groups is None else groups[i]
        levels.setdefault(group, ([], []))[0 if answer.correct else 1].append(i)
    pairs: list[tuple[int, int]] = []
    for right, wrong in levels.values():
        by_rank = [sorted(indices, key=lambda i: answers[i].rank) for indices in (right, wrong)]
        pairs.extend(zip(*by_rank, strict=False))
    return pairs


def lowest_ranked_pairs(answers: Sequence[CheckedAnswer], pairs: Sequence[tuple[int, int]],
                        most: int) -> list[tuple[int, int]]:
    """At most ``most`` of ``pairs``, those whose correct answer ranks lowest: a seeded choice that
    keeps every level balanced (within a level the pairs kept are the first in rank order)."""
    return sorted(pairs, key=lambda pair: answers[pair[0]].rank)[:most]
