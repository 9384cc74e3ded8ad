"""The Python API (``app.api``) on scripted seats and a real store: results returned, nothing
printed, bad input refused with what to change and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from heard import Heard
from sqlalchemy import func, select

from app import api
from storage.models import Episode, Run

CRITIC = {"critic": "scripted:always-correct"}


def test_play_returns_its_run_and_logs_every_episode(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    progress = Heard()
    result = api.play("math-reflection", episodes=4, seats={"actor": "scripted:calculator", **CRITIC},
                      tasks="arithmetic:1", options={"turns": 1}, temperature=0.0, concurrency=2, progress=progress)
    assert (result.game, result.episodes, result.succeeded, result.first_failure) == ("math-reflection", 4, 4, None)
    assert result.seats == {"actor": "scripted:calculator", "critic": "scripted:always-correct", "judge": "rules"}
    assert result.summary["run_id"] == result.run_id and result.summary["episodes"] == 4
    assert progress.named("planned") == [(4,)] and progress.named("loaded") == [()]
    assert progress.named("episode") == [(True,)] * 4
    assert not progress.named("counts")  # counts come from a Ray cluster's store only
    engine = api.open_store(url)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Episode).where(Episode.run_id == result.run_id)) == 4
        config = conn.scalar(select(Run.config).where(Run.id == result.run_id))
    assert config["options"]["turns"] == 1 and config["seats"] == result.seats
    assert capsys.readouterr() == ("", "")  # a library call prints nothing


def test_seats_may_be_given_as_the_cli_gives_them(url: str) -> None:
    result = api.play("math-reflection", episodes=2, seats=["actor=scripted:echo", "critic=scripted:always-correct"],
                      options={"turns": 1})
    assert result.seats["actor"] == "scripted:echo" and result.episodes == 2


def test_a_short_task_file_is_played_whole_and_said(url: str, tmp_path: Path) -> None:
    tasks = tmp_path / "three.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"{a}+1?", "answer": f"#### {a + 1}"}) + "\n" for a in range(3)))
    progress = Heard()
    result = api.play("math-reflection", episodes=10, tasks=str(tasks), seats={"actor": "scripted:calculator",
                      **CRITIC}, options={"turns": 1}, progress=progress)
    assert result.episodes == 3 and progress.named("planned") == [(3,)]
    assert progress.named("warn") == [(f"{tasks} has only 3 task(s): playing 3 episode(s), not the 10 asked for",)]


@pytest.mark.parametrize(("call", "message"), [
    ({"game": "chess"}, "unknown game 'chess'"),
    ({"game": "math-reflection", "seats": {"referee": "scripted:echo"}}, "has no seat 'referee'"),
    ({"game": "math-reflection", "seats": {"critic": "scripted:genius"}}, "unknown scripted bot"),
    ({"game": "math-reflection", "seats": {"actor": "model:actor@v9"}}, "actor@v9"),
    ({"game": "math-reflection", "options": {"agents": 3}}, "--agents: not an option of math-reflection"),
    ({"game": "math-reflection", "tasks": "arithmetic:9"}, "arithmetic"),
    ({"game": "math-reflection", "timeout_s": 0.0}, "timeout_s must be a positive number"),
])
def test_bad_input_is_refused_before_anything_is_played(url: str, call: dict, message: str) -> None:
    with pytest.raises(api.InputError, match=message.replace("(", r"\(")):
        api.play(**call)
    with api.open_store(url).connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Run)) == 0


def test_the_manuals_example_runs_as_written(url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "python.md").read_text()
    example = page.split("```python\n", 1)[1].split("```", 1)[0]
    assert 'database_url="sqlite:///sparring.db"' in example
    exec(example.replace("sqlite:///sparring.db", url), {})  # the page's own code, on this test's store
    run_id, succeeded = capsys.readouterr().out.splitlines()[0].split()[:2]
    with api.open_store(url).connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Episode).where(Episode.run_id == run_id)) == 8
    assert int(succeeded) == 8


def test_evaluate_compares_two_policy_sets_paired_and_reuses_its_runs(url: str) -> None:
    calls = {"seats": {"actor": "scripted:calculator", **CRITIC}, "against": {"actor": "scripted:echo"},
             "tasks": "arithmetic:1", "n": 12, "options": {"turns": 1}}
    progress = Heard()
    report = api.evaluate("math-reflection", progress=progress, **calls)
    assert report.game == "math-reflection" and report.against is not None
    assert report.against["actor"] == "scripted:echo" and report.against["critic"] == "scripted:always-correct"
    assert [s.name for s in report.sets] == ["unseen", "heldout"]  # the generator's evaluation splits
    for found in report.sets:
        assert len(found.tasks) == 12 and found.against is not None
        assert found.result.episodes == found.against.episodes == 12 and not found.result.reused
        assert set(found.result.per_task["pass@turn-1"]) == {t.id for t in found.tasks}
        assert found.result.metrics["pass@turn-1"].n == 12
        assert found.result.label == f"eval actor=scripted:calculator critic=scripted:always-correct judge=rules " \
                                     f"({found.name})"
        assert found.against.metrics["pass@turn-1"].value == 0.0  # echo repeats the question: never an answer
    assert progress.methods()[:2] == ["loading", "loaded"] and progress.named("phase")
    again = api.evaluate("math-reflection", progress=(repeat := Heard()), **calls)
    assert all(s.result.reused and s.against is not None and s.against.reused for s in again.sets)
    assert [s.result.run_id for s in again.sets] == [s.result.run_id for s in report.sets]
    assert any("reusing run" in line for (line,) in repeat.named("say"))


def test_evaluate_refuses_an_adapter_version_the_store_lacks(url: str) -> None:
    with pytest.raises(api.InputError, match="actor@v3"):
        api.evaluate("math-reflection", seats={"actor": "model:actor@v3"}, n=4)
    with api.open_store(url).connect() as conn:
        assert conn.scalar(select(func.count()).select_from(Run)) == 0
