"""Logs as a capable model would have left them, for tests that need something to learn from.

Dataset builds never read a scripted bot's turns (their token ids are bytes, their logprobs 0),
and a tiny random model never answers right; so a test plays the game with scripted bots that
do (the calculator, an always-correct critic) and then relabels their turns as turns of the
base model without adapter, which is what a model playing that well would have logged.
"""

from __future__ import annotations

from sqlalchemy import update

from storage.engine import open_store
from storage.models import Turn


def as_model_turns(url: str, *seats: str, model: str = "bundled") -> int:
    """Relabel the scripted turns of ``seats`` in the store at ``url`` as ``model``'s (served
    in-process, no adapter); returns how many turns were relabelled."""
    engine = open_store(url)
    try:
        with engine.begin() as conn:
            relabelled = conn.execute(
                update(Turn)
                .where(Turn.seat.in_(seats), Turn.backend == "scripted")
                .values(backend="inprocess", policy=model, served_by=model)
            ).rowcount
    finally:
        engine.dispose()
    if not relabelled:
        raise AssertionError(f"no scripted turn of {', '.join(seats)} to relabel: play the game first")
    return relabelled
