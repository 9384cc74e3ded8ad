"""The before/after tables `sparring retrain` ends with: every stage, figure and family shown
whole in an 80-column terminal."""

from __future__ import annotations

import random

import pytest

from app.commands.retrain import _print_learning
from app.output import Format
from evaluation.evaluator import EvaluationResult
from graphs.metrics.stats import Estimate, mean_estimate
from graphs.tasks import load_tasks


def _result(tasks: list, rate: float, reviews: int, seed: int) -> EvaluationResult:
    draw = random.Random(seed)
    outcomes = {t.id: float(draw.random() < rate) for t in tasks}
    return EvaluationResult(
        metrics={"pass@turn-1": mean_estimate(list(outcomes.values())),
                 "critic_balanced_accuracy": Estimate(0.5 + rate, reviews, 0.3 + rate, 0.6 + rate)},
        per_task={"pass@turn-1": outcomes}, run_id=f"run{seed}", label="x", episodes=len(tasks), failed=0)


def test_the_learning_tables_lose_nothing_at_80_columns(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    sets = {name: load_tasks("arithmetic:2", n=120, seed=0, split=name) for name in ("unseen", "heldout")}
    figures = {"before": {name: _result(tasks, 0.05, 220, i) for i, (name, tasks) in enumerate(sets.items())},
               "round 1": {name: _result(tasks, 0.25, 303, 9 + i) for i, (name, tasks) in enumerate(sets.items())}}

    _print_learning(figures, sets, [], Format.table, "math-reflection: 120 tasks a set", tmp_path / "curve.png")

    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert max(len(line) for line in lines) <= 80 and "not shown" not in printed, printed
    for name, tasks in sets.items():
        assert f"math-reflection: 120 tasks a set: {name}" in printed
        assert f"pass@turn-1 by task family: {name}" in printed
        for stage in figures:
            shown = figures[stage][name].metrics["pass@turn-1"].format(with_n=False)
            assert any(line.startswith("pass@turn-1") and shown in line for line in lines), (stage, name)
    critic = [line for line in lines if line.startswith("critic_balanced_accuracy")]
    assert len(critic) == 2 and all(line.rstrip().endswith("220, 303") for line in critic)  # n of each stage
    family_lines = [line for line in lines if line.split()[:1] == ["mul-sub"]]
    assert len(family_lines) == 2 and all("[" in line.split("]", 2)[-1] for line in family_lines)  # change shown
    assert (tmp_path / "curve.png").is_file() and (tmp_path / "curve-families.png").is_file()
