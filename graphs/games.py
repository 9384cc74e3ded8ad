"""The registry of games by name: one line per game.

Each line names a module whose ``GAME`` is the game's ``GameSpec`` (``graphs.game``). More
games join without editing sparring: SPARRING_GAMES lists further modules (comma-separated,
importable from the Python path), e.g. ``SPARRING_GAMES=mypackage.negotiation.game``.
"""

from __future__ import annotations

import importlib
import os

from graphs.game import GameSpec

GAME_MODULES = (
    "graphs.math_reflection.game",
    "graphs.debate.game",
    "graphs.negotiation.game",
    "graphs.ensemble.game",
    "graphs.discussion.game",
    "graphs.story.game",
    "graphs.retrieval.game",
    "graphs.code_debug.game",
    "graphs.textarena_games.game",
)
EXTRA_GAMES_ENV = "SPARRING_GAMES"


class UnknownGameError(ValueError):
    pass


def game_modules() -> list[str]:
    """The built-in game modules, then those of SPARRING_GAMES."""
    extra = [name.strip() for name in os.environ.get(EXTRA_GAMES_ENV, "").split(",") if name.strip()]
    return [*GAME_MODULES, *extra]


def _load(module_name: str) -> GameSpec:
    try:
        game = importlib.import_module(module_name).GAME
    except (ImportError, AttributeError) as exc:
        raise UnknownGameError(f"game module {module_name!r} (from {EXTRA_GAMES_ENV}): {exc}; name a module on the "
                               "Python path whose GAME is a graphs.game.GameSpec") from exc
    if not isinstance(game, GameSpec):
        raise UnknownGameError(f"{module_name}.GAME is a {type(game).__name__}, not a graphs.game.GameSpec")
    return game


def game_registry() -> dict[str, GameSpec]:
    games: dict[str, GameSpec] = {}
    for module_name in game_modules():
        game = _load(module_name)
        if game.name in games:
            raise UnknownGameError(f"two games are named {game.name!r} (the second in {module_name}); rename one")
        games[game.name] = game
    return games


def get_game(name: str) -> GameSpec:
    games = game_registry()
    if name not in games:
        raise UnknownGameError(f"unknown game {name!r}; available games: {', '.join(sorted(games))}")
    return games[name]
