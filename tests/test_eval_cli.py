"""`sparring eval` with scripted policies on real stores: figures, paired comparisons, reuse
of stored runs across invocations, and bad input refused before anything is logged."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from cli_calls import unwrapped
from sqlalchemy import func, select
from tiny_model import save_random_lora, save_tiny_model
from transformers import LlamaForCausalLM
from typer.testing import CliRunner

from app.cli import app
from evaluation.evaluator import evaluation_key
from graphs.math_reflection import game
from graphs.metrics.stats import mcnemar_exact, wilson
from storage.engine import open_store
from storage.models import Episode, Run
from training.registry import publish

runner = CliRunner()
SCRIPTED = ("--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct", "--turns", "1")



def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def _counts(url: str) -> tuple[int, int]:
    engine = open_store(url)
    with engine.connect() as conn:
        counts = conn.execute(select(func.count()).select_from(Run)).scalar(), conn.execute(
            select(func.count()).select_from(Episode)).scalar()
    engine.dispose()
    return counts


def test_eval_prints_intervals_and_reuses_the_stored_run(url, sums):
    rows = {r["metric"]: r for r in json.loads(cli("eval", "--tasks", str(sums), *SCRIPTED, "--format", "json"))}
    first = rows["pass@turn-1"]
    assert (first["value"], first["n"], first["low"]) == (1.0, 8, wilson(8, 8).low)
    assert rows["critic_recall_correct"]["value"] == 1.0 and rows["critic_balanced_accuracy"]["value"] is None
    assert first["reused"] is False
    assert _counts(url) == (1, 8)
    engine = open_store(url)
    with engine.connect() as conn:
        summary = conn.execute(select(Run.summary)).scalar_one()
    engine.dispose()
    assert set(summary) == {"metrics", "policies", "label", "tasks", "families", "set"} and summary["tasks"] == 8
    assert summary["families"] == {} and summary["set"] == "heldout"  # a file: one family
    assert summary["policies"] == {"actor": "scripted:calculator", "critic": "scripted:always-correct",
                                   "judge": "rules"}
    assert summary["metrics"]["pass@turn-1"] == {"value": 1.0, "n": 8, "low": wilson(8, 8).low, "high": 1.0}

    # a new process asking the same question gets the stored figures: nothing is played again
    again = {r["metric"]: r for r in json.loads(cli("eval", "--tasks", str(sums), *SCRIPTED, "--format", "json"))}
    assert again["pass@turn-1"]["reused"] is True and again["pass@turn-1"]["run_id"] == first["run_id"]
    assert _counts(url) == (1, 8)
    # another setting is another evaluation
    cli("eval", "--tasks", str(sums), *SCRIPTED, "-n", "4", "--format", "json")
    assert _counts(url) == (2, 12)


def test_a_scripted_bot_whose_code_changed_is_played_again(url, sums, monkeypatch):
    """A bot's name stays when its code changes (a fixed rule, a new regex beside it): the
    evaluation key holds a digest of the file defining the bot, so its stored run is not reused."""
    first = {r["metric"]: r for r in json.loads(cli("eval", "--tasks", str(sums), *SCRIPTED, "--format", "json"))}
    monkeypatch.setattr("graphs.policies.scripted._code_digest", lambda bot: "edited")
    edited = {r["metric"]: r for r in json.loads(cli("eval", "--tasks", str(sums), *SCRIPTED, "--format", "json"))}
    assert edited["pass@turn-1"]["reused"] is False and edited["pass@turn-1"]["run_id"] != first["pass@turn-1"]["run_id"]
    assert _counts(url) == (2, 16)


def test_a_game_whose_revision_was_raised_is_played_again(url, sums, monkeypatch):
    """A game's prompts change under the same name and options (math-reflection's critic now sees
    the checker's notes): its raised ``revision`` is in the evaluation key, so the stored run of
    the earlier revision is not reused; revision 1 leaves the key as it was."""
    first = {r["metric"]: r for r in json.loads(cli("eval", "--tasks", str(sums), *SCRIPTED, "--format", "json"))}
    monkeypatch.setattr(game, "GAME", replace(game.GAME, revision=game.GAME.revision + 1))
    raised = {r["metric"]: r for r in json.loads(cli("eval", "--tasks", str(sums), *SCRIPTED, "--format", "json"))}
    assert raised["pass@turn-1"]["reused"] is False and raised["pass@turn-1"]["run_id"] != first["pass@turn-1"]["run_id"]
    assert _counts(url) == (2, 16)
    options = game.GAME.make_options({})
    assert evaluation_key(game.GAME, {}, [], 0, options)["revision"] == game.GAME.revision
    assert "revision" not in evaluation_key(replace(game.GAME, revision=1), {}, [], 0, options)


def test_eval_table_fits_80_columns(url, sums):
    table = cli("eval", "--tasks", str(sums), *SCRIPTED)
    assert "pass@turn-1" in table and "100.0%" in table and "[67.6, 100.0]" in table
    assert max(len(line) for line in table.splitlines()) <= 80
    paired = cli("eval", "--tasks", str(sums), *SCRIPTED, "--against", "actor=scripted:always-incorrect")
    assert "+100.0 [+100.0, +100.0]" in paired
    assert max(len(line) for line in paired.splitlines()) <= 80


def test_against_compares_paired_by_task(url, sums):
    out = cli("eval", "--tasks", str(sums), *SCRIPTED, "--against", "actor=scripted:always-incorrect",
              "--format", "json")
    rows = {r["metric"]: r for r in json.loads(out)}
    first = rows["pass@turn-1"]
    assert first["value"]["value"] == 1.0 and first["against"]["value"] == 0.0
    assert first["difference"]["value"] == 1.0 and first["difference"]["n"] == 8
    assert (first["better"], first["worse"]) == (8, 0)
    assert first["p_value"] == pytest.approx(mcnemar_exact(8, 0))
    assert first["run_id"] != first["against_run_id"]
    assert _counts(url) == (2, 16)  # the critic seat kept the first set's bot in the --against set
    engine = open_store(url)
    with engine.connect() as conn:
        policies = [s["policies"] for s in conn.execute(select(Run.summary)).scalars()]
    engine.dispose()
    assert sorted(p["actor"] for p in policies) == ["scripted:always-incorrect", "scripted:calculator"]
    assert {p["critic"] for p in policies} == {"scripted:always-correct"}


def _refused(args: list[str], *expected: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    for text in expected:
        assert unwrapped(text) in unwrapped(message), message
    assert message.count("error:") == 1


def test_bad_input_is_refused_and_nothing_is_logged(url, sums, tmp_path, monkeypatch):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    _refused(["eval", "--tasks", str(empty), *SCRIPTED], "empty.jsonl", "no rows")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "What is 1 + 1?", "answer": "#### 2"}\n{"question": \n')
    _refused(["eval", "--tasks", str(broken), *SCRIPTED], "broken.jsonl:2", "not valid JSON")
    _refused(["eval", "--tasks", str(sums), "--seat", "actor=model:actor@v9", "--seat", "critic=scripted:echo"],
             "actor@v9", "sparring adapters list", "actor=model:base")
    _refused(["eval", "--tasks", str(sums), *SCRIPTED, "--against", "actor=nonsense"],
             "--against 'actor=nonsense': unknown policy 'nonsense'")

    # a published version whose folder is gone: the store cannot serve it
    model_dir = save_tiny_model(tmp_path / "tiny")
    monkeypatch.setenv("SPARRING_MODEL", str(model_dir))
    engine = open_store(url)
    trained = save_random_lora(LlamaForCausalLM.from_pretrained(model_dir), tmp_path / "trained", seed=1)
    version = publish(engine, role="actor", trained_dir=trained, adapters_root=tmp_path / "adapters",
                      base_model=str(model_dir), trainer="sft", config={}, parent=None, dataset_snapshot_id=None,
                      metrics={})
    engine.dispose()
    shutil.rmtree(version.path)
    _refused(["eval", "--tasks", str(sums), "--seat", "actor=model:actor@v1", "--seat", "critic=scripted:echo"],
             "cannot serve", "actor@v1", "missing")
    assert _counts(url) == (0, 0)


# --- evaluation sets and task families ------------------------------------------------------


def test_the_generator_is_evaluated_on_unseen_wordings_then_held_out_problems_by_family(url):
    out = cli("eval", *SCRIPTED, "-n", "40", "--format", "json")
    records = json.loads(out)
    totals = {(r["set"], r["metric"]): r for r in records if r["family"] is None}
    assert {s for s, _ in totals} == {"unseen", "heldout"}
    assert totals["unseen", "pass@turn-1"]["n"] == totals["heldout", "pass@turn-1"]["n"] == 40
    families = {(r["set"], r["family"]): r for r in records if r["family"] is not None}
    assert {f for s, f in families if s == "unseen"} >= {"add", "sub", "mul", "div", "compare"}
    assert "compare" not in {f for s, f in families if s == "heldout"}  # held out whole: no training wording
    for (split, _), record in families.items():  # each family's pass rate is its tasks' share
        assert record["metric"] == "pass@turn-1" and record["set"] == split and 0 < record["n"] < 40
    assert sum(r["n"] for (s, _), r in families.items() if s == "unseen") == 40
    assert _counts(url) == (2, 80)  # a run per set

    table = cli("eval", *SCRIPTED, "-n", "40", "--split", "unseen", "--family", "mul", "--family", "div")
    assert max(len(line) for line in table.splitlines()) <= 80
    table = " ".join(table.split())  # titles wrap at the table's width
    assert "pass@turn-1 by task family (unseen)" in table and "held-out problems" not in table
    assert "mul 0.0% [0.0, 65.8] 2" in table and "add " not in table


def test_evaluation_set_bad_input_is_refused_before_anything_is_logged(url, tmp_path):
    _refused(["eval", *SCRIPTED, "--family", "cube-roots"], "--family cube-roots: no such family",
             "families: add, add-sub")
    unanswered = tmp_path / "unanswered.jsonl"
    unanswered.write_text(json.dumps({"problem": "What is x?", "answer": " "}) + "\n")
    _refused(["eval", *SCRIPTED, "--guard", str(unanswered)], f"--guard {unanswered}", "no answer to check against",
             "unanswered.jsonl:1")
    _refused(["eval", *SCRIPTED, "--guard", "arithmetic:9"], "bad arithmetic levels '9'")
    assert _counts(url) == (0, 0)
