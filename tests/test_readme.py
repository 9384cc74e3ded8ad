"""The README's examples work from a user's checkout: no path outside the repository, and the
task-file example plays (on scripted seats, into a temporary SQLite file)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from typer.main import get_command
from typer.testing import CliRunner

from app.cli import app
from tests.test_cli import SCRIPTED, _commands

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def readme_commands() -> list[str]:
    """Every `sparring ...` line of the README's bash blocks, without its comment."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    lines = (line.split("  #")[0].strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if re.match(r"^(\S+=\S+ )*sparring ", line)]


def test_no_example_points_outside_the_repository() -> None:
    examples = readme_commands()
    assert any("--tasks" in line for line in examples)
    helps = [command.help for _, command in _commands(get_command(app))]
    for text in [*examples, *helps]:
        assert "../" not in text, text
    for line in examples:
        words = shlex.split(line)
        for flag, value in zip(words, words[1:]):
            if flag == "--tasks" and value.endswith(".jsonl"):
                assert (ROOT / value).is_file(), f"{line}: {value} is not in the repository"


def test_the_task_file_example_plays_from_a_checkout(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'readme.db'}")
    monkeypatch.chdir(ROOT)
    [line] = [line for line in readme_commands() if "--tasks examples/" in line]
    args = shlex.split(line)[1:] + ["--turns", "1", "--format", "json", *SCRIPTED]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])[0]
    assert summary["episodes"] == 20 and summary["succeeded"] == 20
