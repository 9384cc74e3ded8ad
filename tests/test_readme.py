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


README_LINES = 250
"""the README is a front page: the manual is docs/, the measurements docs/results/"""


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_LINES, f"README.md is over {README_LINES} lines: move detail to docs/"
    assert "scripts/setup && .venv/bin/sparring retrain" in text
    assert "scripts/setup --dev && .venv/bin/python -m pytest" in text  # .ci/run runs this one
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):  # every local link and image exists
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).is_file(), f"README.md links to {target}, which does not exist"


def tour_commands() -> list[str]:
    """The `sparring ...` lines of the README's one-minute tour, without comments."""
    text = (ROOT / "README.md").read_text()
    tour = text.split("## A one-minute tour", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in tour.splitlines() if line.startswith("sparring ")]


def test_the_tour_runs_in_seconds(tmp_path, monkeypatch) -> None:
    """Every tour command as written (ID: the newest episode's), on a fresh store: each succeeds,
    the plays log what they say, and `sparring serve` answers with the runs played."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'tour.db'}")
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(ROOT)  # the task-file example names a file of the repository
    commands = tour_commands()
    assert {"games", "play", "episodes", "runs", "serve"} <= {shlex.split(c)[1] for c in commands}
    serve = [c for c in commands if shlex.split(c)[1] == "serve"]
    for line in (c for c in commands if c not in serve):
        args = shlex.split(line)[1:]
        if "ID" in args:
            newest = json.loads(runner.invoke(app, ["episodes", "list", "--limit", "1", "--format", "json"]).stdout)
            args[args.index("ID")] = newest[0]["id"][:8]
        started = time.perf_counter()
        result = runner.invoke(app, args)
        assert result.exit_code == 0, f"{line}\n{result.output}"
        assert time.perf_counter() - started < 60, f"{line} took over a minute"
    runs = json.loads(runner.invoke(app, ["runs", "list", "--format", "json"]).stdout)
    assert sorted(r["game"] for r in runs) == ["math-reflection", "negotiation", "textarena"]
    assert all(r["succeeded"] == r["episodes"] > 0 for r in runs)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    [line] = serve
    server = subprocess.Popen([sys.executable, "-m", "app.cli", *shlex.split(line)[1:], "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=5) as reply:
                    served = json.loads(reply.read())
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read().decode()
                time.sleep(0.5)
        assert {r["id"] for r in served} == {r["run"] for r in runs}
    finally:
        server.terminate()
        server.wait(timeout=30)
