"""The registry of games by name: one line per game.

Each line names a module whose ``GAME`` is the game's ``GameSpec`` (``graphs.contract``). More
games join without editing sparring: SPARRING_GAMES lists further modules (comma-separated,
importable from the Python path), e.g. ``SPARRING_GAMES=mypackage.negotiation.game``.
"""

from __future__ import annotations

import importlib
import os

from graphs.contract import GameSpec
from graphs.judges.reward_verifier import JudgePromptReader
from graphs.policies.scripted import BOTS, Bot, ScriptedBackend

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
                               "Python path whose GAME is a graphs.contract.GameSpec") from exc
    if not isinstance(game, GameSpec):
        raise UnknownGameError(f"{module_name}.GAME is a {type(game).__name__}, not a graphs.contract.GameSpec")
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


def judge_prompt_readers() -> dict[str, JudgePromptReader]:
    """The games whose judge seat a trained verifier can fill, each with the reader of its judge
    prompt (``GameSpec.judge_prompt``)."""
    return {name: game.judge_prompt for name, game in game_registry().items() if game.judge_prompt is not None}


def known_bots() -> dict[str, Bot]:
    """The bots of no game (``graphs.policies.scripted.BOTS``), then those the registered games
    contribute (``GameSpec.bots``)."""
    bots = dict(BOTS)
    for game in game_registry().values():
        for name, bot in game.bots.items():
            if name in bots:
                raise ValueError(f"game {game.name!r} contributes a scripted bot named {name!r}, a name "
                                 "already taken; rename the game's bot")
            bots[name] = bot
    return bots


def scripted_bot(name: str) -> ScriptedBackend:
    """A backend running the built-in or game bot ``name`` (model_name ``scripted:<name>``), as
    the CLI's ``--seat critic=scripted:always-correct`` asks for."""
    bots = known_bots()
    if name not in bots:
        raise ValueError(f"unknown scripted bot {name!r}; built-in bots: {', '.join(bots)}")
    return ScriptedBackend(bots[name], bot_name=name)
