"""`sparring report` and the learning plots, on stores written by the real evaluator (scripted
policies play real episodes into a real SQLite file or PostgreSQL database)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import matplotlib.image
import pytest
from typer.testing import CliRunner

from app.cli import app
from evaluation.evaluator import Evaluator
from evaluation.plots import metric_panels
from evaluation.report import figure_path, policies_name, read_report
from graphs.math_reflection.options import ReflectionOptions
from graphs.metrics.stats import Estimate, wilson
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.registry import get_game, scripted_bot
from graphs.tasks import load_tasks
from storage.engine import open_store
from storage.recorder import Recorder
from storage.records import RunRecord

runner = CliRunner()
POLICY_SETS = [("echo", "always-correct"), ("calculator", "always-incorrect")]


def _evaluate(url: str, sets=POLICY_SETS, n: int = 12) -> list:
    """Evaluate each (actor bot, critic bot) set on the same held-out tasks; the results."""
    engine = open_store(url)
    game = get_game("math-reflection")
    evaluator = Evaluator(engine, game, load_tasks("arithmetic", n=n, seed=0, split="heldout"), 0,
                          ReflectionOptions(turns=2))

    async def run():
        return [await evaluator({"actor": Policy(scripted_bot(a), SamplingParams()),
                                 "critic": Policy(scripted_bot(c), SamplingParams())}, label=f"{a}/{c}")
                for a, c in sets]

    try:
        return asyncio.run(run())
    finally:
        engine.dispose()


def _record_round(url: str, round_index: int, difference: Estimate) -> None:
    """A retrain round's run as training.loop writes it (a gated actor candidate)."""
    engine = open_store(url)
    run = RunRecord.new("math-reflection", {"purpose": f"retrain round {round_index}"}, 0)
    comparison = {"difference": difference.to_dict(), "better": 3, "worse": 1, "p_value": 0.6}
    role = {"role": "actor", "status": "promoted", "detail": "", "snapshot_id": 1, "rows": 40,
            "candidate": f"actor@v{round_index}", "gate": {"metric": "pass@turn-1", "comparison": comparison}}
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        recorder.finish_run(run.id, "finished", {"round": round_index, "episodes": 64, "roles": [role]})
    engine.dispose()


def _assert_real_png(path: Path) -> None:
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels[..., :3].std() > 0.05, f"{path} is blank"


def test_report_draws_each_series_and_writes_one_page(store_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_DATABASE_URL", store_url)
    results = _evaluate(store_url)
    _record_round(store_url, 1, Estimate(0.05, 12, -0.02, 0.12))
    out = tmp_path / "report"

    result = runner.invoke(app, ["report", "--out", str(out)])

    assert result.exit_code == 0, result.output
    page = (out / "index.html").read_text()
    pngs = re.findall(r'<img src="([^"]+)"', page)
    assert pngs == ["series-1.png", "series-1-families.png"]  # the generator's tasks are of several families
    for png in pngs:
        _assert_real_png(out / png)
    assert "math-reflection: 12 heldout tasks, 2 turns" in page  # the set named in the title
    for res in results:  # every figure of both policy sets, with its interval
        assert res.run_id in page
        assert json.dumps(res.label)[1:-1] in page
    estimate = results[1].metrics["pass@turn-1"]
    assert estimate.format() in page and estimate.format() in result.output
    assert "+5.0 pts [-2.0, +12.0]" in page  # the round's gated change
    assert "actor=scripted:calculator critic=scripted:always-incorrect" in result.output
    assert all(len(line) <= 80 for line in result.output.splitlines())


def test_report_json_gives_every_figure_of_every_policy_set(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_DATABASE_URL", db_url)
    results = _evaluate(db_url)
    result = runner.invoke(app, ["report", "--out", str(tmp_path / "r"), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    got = {(r["run_id"], r["metric"]): (r["value"], r["n"], r["low"], r["high"]) for r in records}
    for res in results:
        for name, e in res.metrics.items():
            assert got[(res.run_id, name)] == (e.value, e.n, e.low, e.high)


def test_empty_store_says_how_to_make_something_to_plot(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_DATABASE_URL", db_url)
    result = runner.invoke(app, ["report", "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "nothing to plot yet" in text and "sparring retrain" in text
    assert not (tmp_path / "r").exists()


def test_a_policy_set_measured_again_keeps_its_place_with_its_latest_figures(db_url):
    _evaluate(db_url, sets=POLICY_SETS)
    _evaluate(db_url, sets=POLICY_SETS[:1], n=6)  # other tasks: a series of its own
    engine = open_store(db_url)
    series = read_report(engine).series
    assert [(s.tasks, [p.name for p in s.points]) for s in series] == [
        (12, ["actor=scripted:echo critic=scripted:always-correct",
              "actor=scripted:calculator critic=scripted:always-incorrect"]),
        (6, ["actor=scripted:echo critic=scripted:always-correct"]),
    ]


@pytest.mark.parametrize("rules", ["rules", "verifier"])  # verifier: the old name of rules, in older stores
def test_policy_set_names(rules: str):
    assert policies_name({"actor": "base", "critic": "base", "judge": rules}) == "base"
    assert policies_name({"actor": "actor@v2", "critic": "base", "judge": rules}) == "actor@v2"
    trained = {"actor": "actor@v2", "judge": "verifier:verifier@v1"}  # a trained verifier is named
    assert policies_name(trained) == "actor@v2 verifier:verifier@v1"
    assert policies_name({"critic": "openai:gpt-4o-mini", "actor": "actor@v1"}) == "actor@v1 critic=openai:gpt-4o-mini"


def test_learning_curve_png_has_a_panel_per_metric_with_interval_bars(tmp_path):
    stages = ["before", "round 1", "round 2"]
    metrics = {"pass@turn-1": [wilson(9, 100), wilson(15, 100), wilson(21, 100)],
               "critic_balanced_accuracy": [wilson(50, 100), None, wilson(66, 100)]}
    path = metric_panels(stages, metrics, tmp_path / "curve.png", "learning")
    _assert_real_png(path)


def test_figures_go_beside_the_store(tmp_path):
    assert figure_path(f"sqlite:///{tmp_path}/runs/s.db", tmp_path / "data", "learning-curve.png") == (
        tmp_path / "runs" / "s-learning-curve.png")
    assert figure_path("postgresql+psycopg://u@h/db", tmp_path / "data", "learning-curve.png") == (
        tmp_path / "data" / "learning-curve.png")


@pytest.fixture
def db_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"
