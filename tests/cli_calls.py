"""Run the CLI in this process, as the game tests do: ``cli`` expects success and returns
stdout; ``refused`` expects a failure and returns its message on one line. ``unwrapped``
compares messages that name long paths."""

from __future__ import annotations

from typer.testing import CliRunner

from app.cli import app

runner = CliRunner()


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def refused(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code != 0
    return " ".join(result.output.split())


def unwrapped(text: str) -> str:
    """``text`` without whitespace, to look for a message in: rich wraps stderr at 80 columns
    and folds a word longer than that (a temporary file's path, longer under pytest-xdist) anywhere."""
    return "".join(text.split())
