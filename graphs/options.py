"""A game's options: a frozen dataclass of its own, one documented field per option.

Each game subclasses ``GameOptions``; its fields become options of the commands that play it
(`sparring play`, `eval`, `retrain`, `deploy`), their help read from the docstring under each
field. This module stays light (no LangGraph, no models) because the CLI reads it at start.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
from collections.abc import Mapping
from typing import Any, get_type_hints


@dataclasses.dataclass(frozen=True)
class GameOptions:
    """The options of a game; a game without options uses this class as it is."""


class GameOptionError(ValueError):
    """An option the game does not have, or a value it does not accept."""


def cli_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@functools.cache
def option_docs(options_type: type[GameOptions]) -> dict[str, str]:
    """field name -> the docstring written under the field (first paragraph, one line)."""
    docs: dict[str, str] = {}
    for cls in reversed(options_type.__mro__):
        if not dataclasses.is_dataclass(cls) or cls is object:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):  # no source (built at run time): no help text
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, doc in zip(body, body[1:]):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                    and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)):
                docs[field.target.id] = " ".join(inspect.cleandoc(doc.value.value).split("\n\n")[0].split())
    return docs


def option_fields(options_type: type[GameOptions]) -> dict[str, tuple[type, Any]]:
    """field name -> (type, default) of a game's options; every field needs a default."""
    hints = get_type_hints(options_type)
    fields = {}
    for field in dataclasses.fields(options_type):
        if field.default is dataclasses.MISSING:
            raise TypeError(f"{options_type.__name__}.{field.name} has no default: every game option needs one")
        fields[field.name] = (hints[field.name], field.default)
    return fields


def describe(options: GameOptions) -> list[str]:
    """The options in words, for titles: "2 turns", "stop on correct", "no stop on correct". An
    option left empty (a default the game fills in, e.g. retrieval's shipped corpus) says nothing,
    nor does a switch that is off by default and left off."""
    words = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if value is None or value == "" or (value is False and field.default is False):
            continue
        label = field.name.replace("_", " ")
        words.append((label if value else f"no {label}") if isinstance(value, bool) else f"{value} {label}")
    return words


def make_options(game: str, options_type: type[GameOptions], values: Mapping[str, Any]) -> GameOptions:
    """The game's options with ``values`` (field name -> value) over its defaults; an option
    the game does not have, or a value it refuses, is a GameOptionError that says so."""
    fields = option_fields(options_type)
    unknown = [name for name in values if name not in fields]
    if unknown:
        has = ", ".join(cli_flag(name) for name in fields) or "none"
        raise GameOptionError(
            f"{', '.join(cli_flag(name) for name in unknown)}: not an option of {game} (its options: {has}); "
            "leave it out, or choose the game that has it (`sparring games` lists each game's options)"
        )
    try:
        return options_type(**values)
    except (TypeError, ValueError) as exc:
        raise GameOptionError(f"{game} options: {exc}") from exc
