"""One game's help: `sparring play GAME --help` and `sparring eval|retrain|deploy --game GAME --help`.

``game_facts`` reads what a user needs to play a game from the game registry (seats with their
kind and default policy, bots, options with defaults, metrics, rewards, tasks); the CLI prints it
under a command's own options (``GameHelpCommand``) and the manual's game pages are generated
from it (docs/_scripts/gen_pages.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from typer.core import TyperCommand

from graphs.contract import GameSpec
from graphs.options import cli_flag, option_docs, option_fields
from graphs.policies.scripted import BOTS
from graphs.seats import RULES

ARGS_KEY = "sparring.help.args"
"""ctx.meta key: the command line's words, kept so that `--help` can see the game they name"""


@dataclass(frozen=True)
class OptionFact:
    flag: str
    """``--turns``, or ``--checker / --no-checker`` for a switch"""
    kind: str
    default: str
    help: str


@dataclass(frozen=True)
class GameFacts:
    name: str
    description: str
    seats: list[dict[str, str]]
    """name, kind, default policy, description"""
    bots: list[str]
    """the scripted bots the game contributes (``--seat SEAT=scripted:BOT``)"""
    builtin_bots: list[str]
    """the bots any game's seats take"""
    options: list[OptionFact]
    learners: dict[str, str]
    """learner seat -> the metric its candidates are gated on"""
    metrics: list[str]
    """the metrics `sparring retrain` reports (empty: all the game computes)"""
    rewards: dict[str, str]
    tasks_default: str
    tasks_accepted: str


def _shown(value: Any, flag: str) -> str:
    if isinstance(value, bool):
        return flag if value else "--no-" + flag[2:]
    return "none" if value is None or value == "" else str(value)


def game_facts(game: GameSpec, flags: dict[str, str] | None = None) -> GameFacts:
    """What ``game`` is made of; ``flags`` maps an option's field to the flag a command gives it
    (retrain's debate rounds are ``--game-rounds``), else the field's own flag."""
    flags = flags or {}
    docs = option_docs(game.options)
    options = []
    for name, (kind, default) in option_fields(game.options).items():
        flag = flags.get(name, cli_flag(name))
        switch = kind is bool
        options.append(OptionFact(
            flag=f"{flag} / --no-{flag[2:]}" if switch else flag, kind="switch" if switch else kind.__name__,
            default=_shown(default, flag), help=docs.get(name, name.replace("_", " ")),
        ))
    return GameFacts(
        name=game.name, description=game.description,
        seats=[{"name": s.name, "kind": s.kind.value, "default": s.default_policy if s.takes_policy else f"{RULES} "
                "(takes no policy)", "description": s.description} for s in game.seats],
        bots=sorted(game.bots), builtin_bots=sorted(BOTS), options=options,
        learners={seat: gate.name for seat, gate in game.gate_metrics.items()},
        metrics=list(game.report_metrics), rewards=dict(game.rewards),
        tasks_default=game.tasks.default, tasks_accepted=game.tasks.accepted,
    )


def named_game(args: list[str], *, positional: bool) -> str | None:
    """The registered game the command line names: ``--game NAME`` (or ``--game=NAME``), or, for
    a command whose game is an argument, any word that is a game's name."""
    from graphs.registry import game_registry

    games = game_registry()
    for i, word in enumerate(args):
        if word == "--game" and i + 1 < len(args):
            return args[i + 1]
        if word.startswith("--game="):
            return word.partition("=")[2]
    if positional:
        return next((word for word in args if word in games), None)
    return None


class GameHelpCommand(TyperCommand):
    """A command that plays a game: with a game named, its help shows that game (seats, bots,
    its own options only, metrics) instead of every game's options."""

    game_options: dict[str, str] = {}
    """parameter -> the game option's field, as ``with_game_options`` made them"""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[ARGS_KEY] = list(args)
        return super().parse_args(ctx, args)

    def format_options(self, ctx: Any, formatter: Any) -> None:
        from graphs.registry import UnknownGameError, get_game

        positional = any(p.name == "game" and p.param_type_name == "argument" for p in self.params)
        name = named_game(ctx.meta.get(ARGS_KEY, []), positional=positional)
        try:
            game = get_game(name) if name else None
        except UnknownGameError as exc:
            formatter.write_paragraph()
            formatter.write_text(f"{exc}. The options below are every game's.")
            game = None
        if game is None:
            super().format_options(ctx, formatter)
            return
        records = [(p, p.get_help_record(ctx)) for p in self.get_params(ctx) if p.name not in self.game_options]
        arguments = [r for p, r in records if r is not None and p.param_type_name == "argument"]
        options = [r for p, r in records if r is not None and p.param_type_name == "option"]
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        with formatter.section("Options"):
            formatter.write_dl(options)
        write_game(formatter, game_facts(game, {field: cli_flag(param) for param, field in self.game_options.items()}))


def write_game(formatter: Any, facts: GameFacts) -> None:
    """``facts`` as help sections."""
    with formatter.section(f"Options of {facts.name}"):
        if facts.options:
            formatter.write_dl([(f"{o.flag} <{o.kind}>" if o.kind != "switch" else o.flag,
                                 f"{o.help}  [default: {o.default}]") for o in facts.options])
        else:
            formatter.write_text("none")
    with formatter.section(f"Seats of {facts.name}"):
        formatter.write_dl([(s["name"], f"{s['kind']}; default {s['default']}. {s['description']}")
                            for s in facts.seats])
    with formatter.section("Bots"):
        own = ", ".join(f"scripted:{bot}" for bot in facts.bots) or "none of its own"
        builtin = ", ".join(facts.builtin_bots)
        formatter.write_text(f"{own}; any seat also takes the built-in bots: {builtin} (--seat SEAT=scripted:BOT).")
    with formatter.section("Metrics"):
        gates = "; ".join(f"{seat} is gated on {metric}" for seat, metric in facts.learners.items())
        reported = ", ".join(facts.metrics) if facts.metrics else "every metric the game computes"
        formatter.write_text(f"Reported: {reported}. {gates}.")
    with formatter.section("Rewards"):
        formatter.write_dl(list(facts.rewards.items()))
    with formatter.section("Tasks"):
        formatter.write_text(f"--tasks {facts.tasks_default} by default; accepts {facts.tasks_accepted}")


def game_help_command(command: Any) -> type[GameHelpCommand]:
    """The command class for ``command`` (a function decorated with ``with_game_options``)."""
    return type("GameHelpCommand", (GameHelpCommand,), {"game_options": dict(command.game_options)})
