"""Every command's `--help` at 80 columns loses nothing; a game named shows that game; `--version`;
`sparring runs list|show` on a real SQLite store played by scripted seats."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import app
from graphs.options import cli_flag, option_fields
from graphs.registry import game_registry

runner = CliRunner()
NARROW = {"COLUMNS": "80", "TERMINAL_WIDTH": "80"}
SCRIPTED = ["--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct"]


def _commands(group, prefix=()):
    yield prefix, group
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, (*prefix, name))


def _help(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"], env=NARROW)
    assert result.exit_code == 0, result.output
    return result.output


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path", [p for p, _ in _commands(get_command(app))], ids=lambda p: " ".join(p) or "sparring")
def test_help_at_80_columns_cuts_nothing(path):
    command = dict(_commands(get_command(app)))[path]
    text = _help(*path)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    flat = _flat(text)
    written = ""  # what the command's own texts say, to tell a "…" of theirs from a cut
    for param in command.params:
        if param.name in ("install_completion", "show_completion"):
            continue
        names = [param.metavar or param.name] if param.param_type_name == "argument" else param.opts
        for name in [*names, *param.secondary_opts]:
            assert name in text, f"`sparring {' '.join(path)} --help` lacks {name}"
        help_text = getattr(param, "help", None) or ""
        written += help_text
        assert _flat(help_text) in flat, f"{param.name}'s help is not shown whole:\n{help_text}"
    assert "<bool>" not in text, "a switch shows a value"
    for sub in getattr(command, "commands", {}).values():  # each subcommand's first sentence, whole
        written += sub.help or ""
        assert sub.short_help and sub.help and _flat(sub.help).startswith(sub.short_help[:-1])
        assert _flat(sub.short_help) in flat
    assert flat.count("…") <= written.count("…") + (command.help or "").count("…"), "something was cut with …"


@pytest.mark.parametrize("game", sorted(game_registry()))
def test_play_game_help_shows_that_game(game):
    spec = game_registry()[game]
    text = _help("play", game)
    assert text != _help("play")
    for seat in spec.seats:
        assert f"{seat.name}  " in text or f"{seat.name}\n" in text
        assert f"{seat.kind.value}; default" in text
    for seat, gate in spec.gate_metrics.items():
        assert f"{seat} is gated on {gate.name}" in _flat(text)
    for bot in spec.bots:
        assert f"scripted:{bot}" in text
    own = set(option_fields(spec.options))
    for other in game_registry().values():
        for name in set(option_fields(other.options)) - own:
            assert cli_flag(name) + " " not in text.split(f"Options of {game}")[1], f"{name} of {other.name} shown"
    for name in own:
        assert cli_flag(name) in text.split(f"Options of {game}")[1]


@pytest.mark.parametrize("command", [["eval"], ["retrain"], ["deploy", "actor"]])
def test_game_commands_show_the_game_named_by_option(command):
    text = _help(*command, "--game", "negotiation")
    game_part = text.split("Options of negotiation")[1]
    assert "--max-turns" in game_part and "--turns" not in game_part and "counterpart" in game_part
    assert "default scripted:fair" in _flat(game_part)
    assert "Options of" not in _help(*command)  # no game named: every game's options, as before


def test_an_unknown_game_in_help_says_so_and_shows_every_option():
    text = _help("play", "chess-960")
    assert "--turns" in text and "--max-turns" in text
    text = _help("eval", "--game", "chess-960")
    assert "unknown game 'chess-960'" in _flat(text) and "every game's" in text


def test_play_names_its_game_as_the_other_commands_do_too(store):
    """`play GAME` and `play --game GAME` are one command; two different games are refused."""
    played = runner.invoke(app, ["play", "--game", "negotiation", "-n", "2", "--seat", "proposer=scripted:tough",
                                 "--format", "json"])
    assert played.exit_code == 0, played.output
    assert json.loads(played.stdout.splitlines()[-1])[0]["succeeded"] == 2
    clash = runner.invoke(app, ["play", "debate", "--game", "negotiation"])
    assert clash.exit_code == 2 and "name two games" in _flat(clash.output)
    none = runner.invoke(app, ["play"])
    assert none.exit_code == 2 and "sparring play --game GAME" in _flat(none.output)
    assert "Options of negotiation" in _help("play", "--game", "negotiation")


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"sparring {version('sparring')}"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'runs.db'}")
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    for game, args in (("math-reflection", SCRIPTED), ("negotiation", ["--seat", "proposer=scripted:tough"])):
        played = runner.invoke(app, ["play", game, "-n", "2", *args, "--format", "json"])
        assert played.exit_code == 0, played.output


def test_runs_list_and_show(store):
    listed = runner.invoke(app, ["runs", "list", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    runs = json.loads(listed.stdout)
    assert [r["game"] for r in runs] == ["negotiation", "math-reflection"]
    assert all(r["status"] == "finished" and r["episodes"] == 2 for r in runs)
    lines = runner.invoke(app, ["runs", "list", "--game", "negotiation", "--format", "jsonl"]).stdout.splitlines()
    assert [json.loads(line)["game"] for line in lines] == ["negotiation"]
    table = runner.invoke(app, ["runs", "list"], env=NARROW)
    assert table.exit_code == 0 and runs[0]["run"][:8] in table.output and "negotiation" in table.output

    prefix = runs[1]["run"][:6]
    shown = runner.invoke(app, ["runs", "show", prefix, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    run = json.loads(shown.stdout)[0]
    assert run["run"] == runs[1]["run"] and run["config"]["seats"]["actor"] == "scripted:calculator"
    assert sum(run["episodes_by_status"].values()) == 2
    table = runner.invoke(app, ["runs", "show", prefix], env=NARROW)
    assert table.exit_code == 0 and "config.seats" in table.output and "summary.succeeded" in table.output
    assert all(len(line) <= 80 for line in table.output.splitlines())


def test_runs_refuse_what_is_not_there(store):
    unknown = runner.invoke(app, ["runs", "show", "zzzz"])
    assert unknown.exit_code == 2 and "no run id is or starts with 'zzzz'" in _flat(unknown.output)
    assert "sparring runs list" in _flat(unknown.output)
    bad = runner.invoke(app, ["runs", "list", "--status", "done"])
    assert bad.exit_code == 2 and "finished" in bad.output


def test_a_list_item_broken_in_the_source_is_refilled_as_one():
    from app.help_format import wrap

    text = ("* `sparring train sft --role critic` (the critic learns the\n"
            "  ground truth)\n"
            "* `sparring play`\n"
            "  $ kept as written\n"
            "    an indented line of its own")
    assert wrap(text, 80) == [
        "* `sparring train sft --role critic` (the critic learns the ground truth)",
        "* `sparring play`",
        "  $ kept as written",
        "    an indented line of its own",
    ]
    assert wrap(text, 40)[:3] == ["* `sparring train sft --role critic`", "  (the critic learns the ground truth)",
                                  "* `sparring play`"]
