"""Each game's options as options of the commands that play games (play, eval, retrain, deploy).

``with_game_options`` gives a command one option per field of every registered game's options
dataclass (``--turns``, ``--rounds``...), with the help written under the field. The command
receives what the user gave as a ``GameOptionValues``; ``make(game)`` turns it into that
game's options, and an option of another game is an error that says whose it is.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

import typer

from graphs.contract import GameSpec
from graphs.options import GameOptions, cli_flag, option_docs, option_fields
from graphs.registry import game_registry

F = TypeVar("F", bound=Callable[..., Any])
PARAMETER = "game_options"
"""The parameter of a command that receives the values (it is not a CLI option itself)."""


@dataclass(frozen=True)
class GameOptionValues:
    given: dict[str, Any]
    """field name -> value, for the options the user gave"""
    defaults: dict[str, Any] = field(default_factory=dict)
    """the command's own defaults, for games that have the field (else the game's default)"""

    def make(self, game: GameSpec) -> GameOptions:
        """``game``'s options (GameOptionError, a ValueError, for an option it does not have)."""
        fields = option_fields(game.options)
        return game.make_options({**{k: v for k, v in self.defaults.items() if k in fields}, **self.given})


NONE_GIVEN = GameOptionValues({})
"""The default of a command's ``game_options`` parameter (the decorator always passes one)."""


def _options_of_games(defaults: dict[str, Any]) -> dict[str, tuple[type, str]]:
    """field name -> (type, help) over every game; a name two games type differently is an error."""
    found: dict[str, tuple[type, list[str]]] = {}
    for game in game_registry().values():
        docs = option_docs(game.options)
        for name, (kind, default) in option_fields(game.options).items():
            shown = defaults.get(name, default)
            if isinstance(shown, bool):
                shown = cli_flag(name) if shown else "--no-" + cli_flag(name)[2:]
            part = f"{game.name}: {docs.get(name, name.replace('_', ' '))} [default: {shown}]"
            if name in found and found[name][0] is not kind:
                raise TypeError(f"game option {name!r} is a {found[name][0].__name__} in one game and a "
                                f"{kind.__name__} in {game.name}; give them one type or two names")
            found.setdefault(name, (kind, []))[1].append(part)
    return {name: (kind, "; ".join(parts)) for name, (kind, parts) in found.items()}


def with_game_options(**defaults: Any) -> Callable[[F], F]:
    """Give the command every game's options; ``defaults`` override a game's own default for
    this command (e.g. ``turns=2``). A game option named like one of the command's own options
    gets the flag ``--game-NAME`` (retrain's --rounds are its rounds, debate's --game-rounds)."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        extra = []
        fields: dict[str, str] = {}  # parameter name -> the game option's field name
        for name, (kind, help_text) in _options_of_games(defaults).items():
            param = f"game_{name}" if name in signature.parameters else name  # retrain --rounds: --game-rounds
            fields[param] = name
            flag = cli_flag(param)
            decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag]
            annotation = Annotated[kind | None, typer.Option(*decls, help=help_text, show_default=False)]
            extra.append(inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
        params = []
        for param in signature.parameters.values():
            if param.name == PARAMETER:
                params.extend(extra)
            else:
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {fields[param]: kwargs.pop(param, None) for param in fields}
            given = {name: value for name, value in values.items() if value is not None}
            return command(**kwargs, **{PARAMETER: GameOptionValues(given, defaults)})

        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.game_options = fields  # type: ignore[attr-defined]  # read by the per-game help (game_help.py)
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run  # type: ignore[return-value]

    return decorate
