"""End to end: `sparring play math-reflection` on the real bundled model, checked in the store.

Uses the default model cache (~/.cache/sparring or SPARRING_CACHE_DIR), so the GGUF is
converted once per machine and reused by later runs, as it is for users.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from app.cli import app
from model_logs import as_model_turns
from storage.engine import open_store
from storage.models import Episode, Reward, Turn, TurnPayload

pytestmark = pytest.mark.slow


def test_play_math_reflection_on_the_bundled_model(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'e2e.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    result = CliRunner().invoke(app, [
        "play", "math-reflection", "-n", "6", "-c", "6", "--turns", "2", "--no-stop-on-correct",
        "--max-new-tokens", "48", "--temperature", "0.7", "--format", "json",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])[0]
    assert summary["succeeded"] == 6 and summary["generated_tokens"] > 0
    assert 0.0 <= summary["pass@turn-1"] <= 1.0 and 0.0 <= summary["critic_accuracy"] <= 1.0

    engine = open_store(url)
    with engine.connect() as conn:
        episodes = conn.execute(select(Episode.status, Episode.num_turns)).all()
        turns = conn.execute(
            select(Turn.id, Turn.seat, Turn.served_by, Turn.backend, Turn.completion_tokens, Turn.parsed,
                   TurnPayload.prompt_token_ids, TurnPayload.completion_token_ids, TurnPayload.logprobs)
            .join(TurnPayload, TurnPayload.turn_id == Turn.id)
        ).all()
        rewards = conn.execute(select(Reward.turn_id, Reward.name, Reward.value)).all()
    assert episodes == [("succeeded", 4)] * 6
    assert len(turns) == 24 and [t.seat for t in turns].count("actor") == 12
    for turn in turns:
        assert turn.served_by == "bundled" and turn.backend == "inprocess"
        assert len(turn.prompt_token_ids) > 20
        # the critic's free part is capped at 48 tokens; its forced "Verdict: ..." line comes on top
        most = 48 if turn.seat == "actor" else 48 + 8
        assert 0 < len(turn.completion_token_ids) == len(turn.logprobs) == turn.completion_tokens <= most
        assert all(lp <= 0.0 for lp in turn.logprobs)
        assert all(0 <= t < 49152 for t in turn.completion_token_ids)  # SmolLM2's vocabulary
    by_turn = {(r.turn_id, r.name): r.value for r in rewards}
    for turn in turns:
        name = "correct" if turn.seat == "actor" else "verdict_correct"
        assert by_turn[(turn.id, name)] in (0.0, 1.0)
        if turn.seat == "actor" and turn.parsed is False:
            assert by_turn[(turn.id, "correct")] == 0.0


def test_one_retrain_round_on_the_bundled_model(tmp_path, monkeypatch):
    """`sparring retrain --once` on the real model, kept small: earlier logs hold right answers
    (a scripted calculator played them) so the actor has rows whatever the model samples; both
    roles train, gate (margin 1: always promoted here) and serve the next episodes."""
    url = f"sqlite:///{tmp_path / 'loop.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    tasks = tmp_path / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + 5?", "answer": f"#### {a + 5}"}) + "\n"
                             for a in range(24)))
    runner = CliRunner()
    seeded = runner.invoke(app, ["play", "math-reflection", "-n", "8", "--turns", "1", "--tasks", str(tasks),
                                 "--split", "train", "--seat", "actor=scripted:calculator",
                                 "--seat", "critic=scripted:always-correct"])
    assert seeded.exit_code == 0, seeded.output
    as_model_turns(url, "actor", "critic")  # as a model that answers this well would have left them
    result = runner.invoke(app, [
        "retrain", "--once", "--tasks", str(tasks), "--min-rows", "1", "--practice", "8", "--every-episodes", "8", "--samples", "4",
        "-c", "8",
        "--eval-tasks", "4", "--turns", "1", "--max-new-tokens", "32", "--max-steps", "2", "--margin", "1",
        "--format", "json",
    ])
    assert result.exit_code == 0, result.output
    rounds, report = (json.loads(line) for line in result.stdout.strip().splitlines()[-2:])
    actor, critic = rounds
    assert (actor["role"], actor["status"], actor["candidate"]) == ("actor", "promoted", "actor@v1"), actor
    # the critic is gated on balanced accuracy, which 4 held-out tasks may not define (the actor
    # right on all or wrong on all): then the gate rejects and says so, margin or not
    assert critic["role"] == "critic" and critic["candidate"] == "critic@v1", critic
    assert critic["status"] == "promoted" or "balanced accuracy" in critic["detail"], critic
    assert all(r["rows"] > 0 for r in rounds)
    assert {m["metric"] for m in report} >= {"pass@turn-1", "critic_balanced_accuracy"}
    assert rounds[0]["episodes"] == 16  # 8 solo practice episodes of the actor, then 8 full ones
    assert all(set(m) == {"metric", "set", "family", "before", "round 1"} and m["family"] is None for m in report)

    engine = open_store(url)
    with engine.connect() as conn:
        last_run = conn.execute(select(Episode.run_id).order_by(Episode.finished_at.desc()).limit(1)).scalar_one()
        served = set(conn.execute(select(Turn.seat, Turn.served_by).join(Episode, Episode.id == Turn.episode_id)
                                  .where(Episode.run_id == last_run)).all())
    assert served == {("actor", "actor@v1"), ("critic", "critic@v1")}  # the last run: the critic's gate
