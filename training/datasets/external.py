"""External games: games the registry (``graphs/registry.py``) does not know, whose agents
sparring did not write. `sparring gateway` logs their calls as turns (docs/gateway.md), and the
builders read their episodes like any game's, with what a game spec would have given them
made from the logs:

- seats: the seats their turns were logged under, each a learner (``storage.logged``);
- credit: a turn's credit is the sum of the reward events attached to it (as the default
  rule of registered games). A reward attached to the episode for a seat, with no turn (an
  episode reward), is the credit of every turn of that seat in the episode, unless the client
  named turns: when some turn of the seat has a reward of its own, only those turns have credit;
- no refinements, truth verdicts or other seats' rewards to read.
"""

from __future__ import annotations

from graphs.contract import GameSpec
from graphs.registry import game_registry
from training.datasets.reading import EpisodeLog


def registered_game(game: str) -> GameSpec | None:
    """The game's spec, or None for an external game (a module of SPARRING_GAMES that fails to
    load is still an error)."""
    return game_registry().get(game)


def external_credits(episode: EpisodeLog, role: str) -> dict[str, float]:
    """turn id -> credit, for the selected turns of ``role`` in an external game's episode."""
    turns = [t for t in episode.turns if t.selected and t.seat == role]
    named = {t.turn_id: sum(t.rewards.values()) for t in turns if t.rewards}
    if named:
        return named
    shared = episode.seat_rewards.get(role)
    return {} if not shared else dict.fromkeys((t.turn_id for t in turns), sum(shared.values()))
