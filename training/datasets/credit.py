"""Credit assignment: the scalar reward of each turn of a role, per role and per turn, by the
rule the episode's game gives the role (``GameSpec.credit``; ``graphs/credit.py``), or for an
external game (one the registry does not know) by ``external.external_credits``.

Reward events are read as logged (of several events with one name on a turn, the latest
wins). By default a turn's credit is the sum of the reward events on it (for the
math-reflection actor its ``correct`` reward; for a debater, ``correct`` on each turn plus
``win`` on its last one); a game may give a seat its own rule (the math-reflection critic's
reads the actor's answers around each critique). A turn with no credit makes no row in
builders that need a reward; they are counted.
"""

from __future__ import annotations

from graphs.credit import CORRECT
from training.datasets.external import external_credits, registered_game
from training.datasets.reading import EpisodeLog

__all__ = ["CORRECT", "context_seats", "reads_seat_rewards", "turn_credits"]


def context_seats(game: str, role: str) -> tuple[str, ...]:
    """The other seats whose turns (rewards only) the role's credit rule reads."""
    spec = registered_game(game)
    return () if spec is None else spec.credit_rule(role).reads


def reads_seat_rewards(game: str) -> bool:
    """Whether credit reads the rewards attached to episodes rather than turns (external games)."""
    return registered_game(game) is None


def turn_credits(episode: EpisodeLog, role: str) -> dict[str, float]:
    """turn id -> credit, for the selected turns of ``role`` in ``episode`` that have one."""
    spec = registered_game(episode.game)
    if spec is None:
        return external_credits(episode, role)
    return spec.credit_rule(role).credits(episode.turns, role)
