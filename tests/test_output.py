"""What people see: tables that fit 80 columns, numbers as numbers, secrets masked, progress as
plain lines off a terminal, and library noise in the log file instead of the console."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from pydantic import SecretStr
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
from tiny_model import save_tiny_model

from app.commands.settings_cmd import mask_url, shown
from app.output import Format, emit, number
from app.progress import LineProgress, progress

REPO = Path(__file__).resolve().parent.parent


def _table(rows, width: int = 80, **kwargs) -> list[str]:
    console = Console(file=io.StringIO(), width=width, force_terminal=False)
    emit(rows, Format.table, console=console, **kwargs)
    return console.file.getvalue().splitlines()


def _episode(i: int, **extra) -> dict:
    return {"id": f"{i:02d}3f2a9c0d4e5f6a7b8c9d0e1f2a3b4c", "game": "math-reflection",
            "task_id": f"arith-train-L2-{i:06d}", "status": "succeeded", "reward": 1.0, "num_turns": 2,
            "started_at": datetime(2026, 11, 24, 1, 50 + i), "error_stage": None, **extra}


EPISODE_COLUMNS = ["id", "game", "task_id", "status", "reward", "num_turns", "started_at", "error_stage"]


def test_a_wide_table_keeps_one_line_per_row_within_80_columns():
    rows = [_episode(i) for i in range(5)]
    lines = _table(rows, columns=EPISODE_COLUMNS, title="episodes")
    assert all(len(line) <= 80 for line in lines), lines
    body = [line for line in lines if "arith-train" in line]
    assert len(body) == 5  # one line per row, none wrapped
    assert body[0].split()[:2] == ["003f2a9c", "arith-train-L2-000000"]  # ids shortened to 8
    assert "game: math-reflection" in lines and "error_stage: -" in lines  # alike columns below the table


def test_columns_that_cannot_fit_are_named_and_json_keeps_them(capsys):
    rows = [_episode(i, status=s, error_stage=e, game=g) for i, (s, e, g) in
            enumerate([("failed", "critic", "debate"), ("succeeded", None, "math-reflection")])]
    lines = _table(rows, columns=EPISODE_COLUMNS)
    assert all(len(line) <= 80 for line in lines), lines
    assert any(line.startswith("not shown: ") and "error_stage" in line for line in lines), lines
    emit(rows, Format.jsonl, columns=EPISODE_COLUMNS)
    assert all('"error_stage"' in line for line in capsys.readouterr().out.splitlines())


def test_free_text_wraps_at_words_and_names_never_split():
    path = "/root/.cache/sparring/vllm-venv/and/more"
    text = "The venv vLLM is installed in (scripts/setup-vllm creates it); `sparring vllm` uses it. " * 2
    lines = _table([{"env": "SPARRING_SERVED_MODEL_NAME", "value": path, "help": text}])
    assert all(len(line) <= 80 for line in lines), lines
    header, body = lines[0], lines[2:]
    value_at, help_at = header.index("value"), header.index("help")
    assert body[0].startswith("SPARRING_SERVED_MODEL_NAME ") and len(body) > 1
    assert "".join(line[value_at:help_at].strip() for line in body) == path  # the path folds
    assert " ".join(line[help_at:].strip() for line in body) == text.strip()  # the text wraps at words


def test_headers_never_break():
    rows = [{"name": "actor@v1", "status": "candidate", "trainer": "sft", "parent_id": None, "dataset": 1,
             "created_at": datetime(2026, 11, 24), "promoted_at": datetime(2026, 11, 24)}]
    lines = _table(rows)
    assert all(len(line) <= 80 for line in lines), lines
    header = next(line for line in lines if line.startswith("name"))
    assert header.split()[:4] == ["name", "status", "trainer", "parent_id"]


@pytest.mark.parametrize("value, text", [(5220.4, "5220"), (82.8, "82.8"), (0.444, "0.444"), (1e-05, "1e-05"),
                                         (0.0, "0"), (-1234.0, "-1234")])
def test_numbers_are_written_as_numbers(value, text):
    assert number(value) == text


def test_secrets_are_masked_in_urls_and_secret_settings():
    assert mask_url("postgresql+psycopg://bob:s3cret@db:5432/x?sslmode=require&password=p2") == (
        "postgresql+psycopg://bob:****@db:5432/x?sslmode=require&password=****")
    assert mask_url("https://api.example.com/v1?api_key=sk-123&x=1") == "https://api.example.com/v1?api_key=****&x=1"
    assert mask_url("sqlite:///sparring.db") == "sqlite:///sparring.db"
    assert shown(SecretStr("sk-abcdef")) == "****" and shown(None) == "None"


def test_settings_command_masks_the_database_password_in_every_format(monkeypatch):
    from typer.testing import CliRunner

    from app.cli import app

    monkeypatch.setenv("SPARRING_DATABASE_URL", "postgresql+psycopg://bob:s3cret@db:5432/x")
    monkeypatch.setenv("SPARRING_OPENAI_API_KEY", "sk-abcdef")
    for fmt in ("table", "json", "jsonl"):
        result = CliRunner().invoke(app, ["settings", "--format", fmt])
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output and "sk-abcdef" not in result.output
        assert "****" in result.output


def test_settings_say_what_auto_precision_is_here(monkeypatch):
    from typer.testing import CliRunner

    from app.cli import app
    from graphs.policies import cpu_precision

    monkeypatch.setenv("SPARRING_DEVICE", "cpu")
    monkeypatch.setenv("SPARRING_EVAL_DTYPE", "auto")
    monkeypatch.delenv("SPARRING_DTYPE", raising=False)
    for speedup, precision in ((0.7, "float32"), (2.0, "bfloat16")):
        monkeypatch.setattr(cpu_precision, "bfloat16_speedup", lambda cache_dir=None, speedup=speedup: speedup)
        result = CliRunner().invoke(app, ["settings", "--format", "json"])
        assert result.exit_code == 0, result.output
        values = {row["env"]: row["value"] for row in json.loads(result.output)}
        assert values["SPARRING_DTYPE"] == values["SPARRING_EVAL_DTYPE"] == f"auto (here: {precision})"
    monkeypatch.setenv("SPARRING_DTYPE", "float32")  # named: shown as given
    result = CliRunner().invoke(app, ["settings", "--format", "json"])
    values = {row["env"]: row["value"] for row in json.loads(result.output)}
    assert values["SPARRING_DTYPE"] == "float32" and values["SPARRING_EVAL_DTYPE"] == "auto (here: float32)"


def _lines(file: io.StringIO) -> list[str]:
    return [" ".join(line.split()) for line in file.getvalue().splitlines()]


def _line_progress(period_s: float) -> tuple[LineProgress, io.StringIO]:
    file = io.StringIO()
    console = Console(file=file, width=80, force_terminal=False)
    bar = progress(TextColumn("play"), BarColumn(), MofNCompleteColumn(), console=console)
    assert isinstance(bar, LineProgress)
    bar.period_s = period_s
    return bar, file


def test_off_a_terminal_progress_is_plain_lines_as_it_goes():
    bar, file = _line_progress(period_s=0.0)
    with bar:
        task = bar.add_task("play", total=3)
        for done in range(1, 4):
            bar.update(task, completed=done)
            assert _lines(file)[-1] == f"play {done}/3"  # printed at once, not at the end
    assert _lines(file) == ["play 0/3", "play 1/3", "play 2/3", "play 3/3"]


def test_plain_progress_lines_are_periodic():
    bar, file = _line_progress(period_s=3600.0)
    with bar:
        task = bar.add_task("play", total=100)
        for _ in range(60):
            bar.advance(task)
        assert _lines(file) == ["play 0/100"]
    assert _lines(file) == ["play 0/100", "play 60/100"]  # the last state when it stops


def _sparring(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", "from app.cli import main; main()", *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_library_noise_goes_to_the_log_file_unless_verbose(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "COLUMNS": "80",
           "SPARRING_DATABASE_URL": f"sqlite:///{tmp_path / 'q.db'}", "SPARRING_DATA_DIR": str(tmp_path / "data"),
           "SPARRING_MODEL": str(save_tiny_model(tmp_path / "tiny")), "SPARRING_DEVICE": "cpu",
           "SPARRING_CACHE_DIR": str(tmp_path / "cache")}
    for name in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS",
                 "TRANSFORMERS_VERBOSITY", "DATASETS_VERBOSITY", "PYTHONWARNINGS"):
        env.pop(name, None)
    play = ["play", "math-reflection", "-n", "4", "--turns", "1", "--max-new-tokens", "4", "--split", "train"]

    loud = _sparring("--verbose", *play, env=env, cwd=tmp_path)
    assert loud.returncode == 0, loud.stderr
    assert "Loading weights" in loud.stderr  # the noise this test is about, shown when asked for

    quiet = _sparring(*play, env=env, cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    trained = _sparring("train", "ppo", "--role", "actor", "--max-steps", "1", env=env, cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    for result in (quiet, trained):
        for noise in ("FutureWarning", "Loading weights", "Generating train split", "it/s]", "warnings.warn"):
            assert noise not in result.stderr, result.stderr
    assert "math-reflection 4/4" in quiet.stderr  # sparring's own progress, as plain lines
    assert "published actor@v1" in " ".join(trained.stderr.split())
    log = (tmp_path / "data" / "sparring.log").read_text()
    assert "FutureWarning" in log  # transformers' deprecation warning during training
    headers = [line for line in log.splitlines() if line.startswith("== ")]
    assert len(headers) == 2 and "sparring train ppo --role actor" in headers[1]  # one per quiet command
