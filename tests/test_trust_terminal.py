"""Text from tasks and models reaches the terminal literally: no Rich markup read in it, no
control character or escape sequence sent raw, no crash on a lone surrogate; the task loader
refuses a lone surrogate naming the line and the key; a scripted reply that is cut says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.terminal import printable
from factories import episode_end, episode_start, turn_record
from graphs.code_debug.tasks import read_tasks
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.scripted import ScriptedBackend
from graphs.tasks.base import TaskSourceError
from graphs.tasks.files import load_jsonl
from storage.engine import open_store
from storage.recorder import Recorder

HOSTILE = {
    "brackets": "text[i] == text[i - 1]",
    "markup": "[bold]z[/bold] and [link=http://evil.example]click[/link]",
    "ansi": "plain \x1b[31mred\x1b[0m \x1b]0;owned title\x07 \x1b[2J",
    "c1": "csi \x9b31m and \x85 next line",
    "carriage return": "shown\rhidden",
    "reordering": "abc\u202edcba",
    "surrogate": "half \udc80 a pair",
}
RAW = ("\x1b", "\x9b", "\x85", "\r", "\u202e", "\x07")


@pytest.mark.parametrize(("text", "shown"), [
    ("a\x1bb", "a\\x1bb"), ("\x9b", "\\x9b"), ("\udc80", "\\udc80"), ("\u202e", "\\u202e"), ("\x7f", "\\x7f"),
    ("tab\tand\nnewline", "tab\tand\nnewline"), ("é 😀 [bold]", "é 😀 [bold]"),
])
def test_printable_escapes_what_a_terminal_would_run(text: str, shown: str):
    assert printable(text) == shown


@pytest.fixture
def hostile_episode(store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """One episode whose task, answer, response, error and task id hold every hostile text (a
    lone surrogate only in the task: JSON columns keep it as an escape, text columns cannot)."""
    monkeypatch.setenv("SPARRING_DATABASE_URL", store_url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    everything = " | ".join(HOSTILE.values())
    storable = " | ".join(text for kind, text in HOSTILE.items() if kind != "surrogate")
    engine = open_store(store_url)
    with Recorder(engine, batch_size=8, flush_interval_s=0.01) as recorder:
        start = episode_start(task_id="task[1]\x1b[31m", task={"question": everything, "answer": everything})
        recorder.episode_started(start)
        recorder.turn(turn_record(start.id, 0, response=storable, served_by="[bold]bot[/bold]"))
        recorder.episode_finished(episode_end(start.id, num_turns=1, error=storable, error_stage="actor turn 0"))
    engine.dispose()
    return start.id


def test_episodes_show_prints_task_and_model_text_literally(hostile_episode: str):
    result = CliRunner().invoke(app, ["episodes", "show", hostile_episode[:12]])
    assert result.exit_code == 0, result.output
    shown = result.stdout
    assert not any(raw in shown for raw in RAW), repr(shown)
    for text in (HOSTILE["brackets"], HOSTILE["markup"], "[bold]bot[/bold]", printable(HOSTILE["ansi"]),
                 printable(HOSTILE["surrogate"]), "\\x9b31m", "\\u202edcba"):
        assert _squashed(text) in _squashed(shown), (text, shown)


def _squashed(text: str) -> str:
    """Without whitespace and panel borders: a panel wraps long text over its lines."""
    return re.sub(r"[\s│]", "", text)


def test_episodes_show_as_json_keeps_a_lone_surrogate_as_its_escape(hostile_episode: str):
    result = CliRunner().invoke(app, ["episodes", "show", hostile_episode[:12], "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["task"]["question"] == " | ".join(HOSTILE.values())


def test_episodes_list_prints_task_ids_literally(hostile_episode: str):
    result = CliRunner().invoke(app, ["episodes", "list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "task[1]\\x1b[31m" in result.stdout and "\x1b" not in result.stdout


def test_an_error_message_escapes_what_it_quotes(store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("SPARRING_DATABASE_URL", store_url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    result = CliRunner().invoke(app, ["export", "out\x1b[2J[bold].txt"])
    assert result.exit_code == 2 and "\x1b" not in result.output
    assert "out\\x1b[2J[bold].txt: use a .jsonl or .parquet file name" in " ".join(result.output.split())


@pytest.mark.parametrize(("line", "where"), [
    ('{"question": "What is 1 + 1? \\udc80", "answer": "#### 2"}', "'question'"),
    ('{"question": "What is 1 + 1?", "answer": "#### 2", "notes": ["ok", "\\ud800"]}', "'notes'[1]"),
])
def test_the_task_loader_refuses_a_lone_surrogate_naming_line_and_key(tmp_path: Path, line: str, where: str):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"question": "What is 2 + 2?", "answer": "#### 4"}\n' + line + "\n")
    with pytest.raises(TaskSourceError) as refused:
        load_jsonl(path)
    assert str(refused.value).startswith(f"tasks.jsonl:2: {where} holds a lone surrogate")
    assert "write the character itself" in str(refused.value)


def test_a_code_task_file_with_a_lone_surrogate_is_refused_and_a_pair_is_kept(tmp_path: Path):
    row = {"description": "Say hi \ud83d\ude00", "reference": "def f():\n    return 1\n",
           "tests": ["assert f() == 1"]}
    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps(row) + "\n")  # json.dumps writes the pair as two escapes: a whole character
    assert read_tasks(path, split=None)[0].question == "Say hi 😀"
    path.write_text(json.dumps({**row, "description": "Say hi \ud83d"}) + "\n")
    with pytest.raises(TaskSourceError, match=r"code.jsonl:1: 'description' holds a lone surrogate \(\\ud83d"):
        read_tasks(path, split=None)


def test_a_scripted_reply_that_is_cut_says_so_once(capsys: pytest.CaptureFixture[str]):
    import asyncio

    backend = ScriptedBackend.replay(["x" * 300, "y" * 300, "short"], name="coder")
    request = GenerationRequest(messages=[{"role": "user", "content": "Q"}],
                                sampling=SamplingParams(max_new_tokens=160))
    results = [asyncio.run(backend.generate(request)) for _ in range(3)]
    assert [r.finish_reason for r in results] == ["length", "length", "stop"]
    printed = capsys.readouterr().err
    assert printed.count("note: scripted:coder wrote a reply of 300 bytes, cut at --max-new-tokens 160") == 1
    assert "raise --max-new-tokens" in printed and backend.cut_notice in printed
