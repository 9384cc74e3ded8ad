"""`api.build_dataset`, `api.train` and `api.deploy` called from Python on a fresh SQLite store:
scripted seats leave the logs, a tiny random model trains and is gated. Bad input raises
InputError, saying what to change, before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from heard import Heard
from model_logs import as_model_turns
from sqlalchemy import func, select
from tiny_model import save_tiny_model

from app.api.datasets import build_dataset
from app.api.deploy import deploy
from app.api.errors import InputError
from app.api.play import play
from app.api.train import train
from storage.engine import open_store
from storage.models import DatasetSnapshot, Run, TrainingJob
from training.registry import get_version


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def lab(tmp_path, monkeypatch, tiny_base) -> str:
    """The URL of a fresh SQLite store (passed to the calls, not set in the environment), the
    tiny model as the base model, and a data folder of its own."""
    monkeypatch.delenv("SPARRING_DATABASE_URL", raising=False)
    monkeypatch.setenv("SPARRING_MODEL", str(tiny_base))
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    return f"sqlite:///{tmp_path / 'store.db'}"


def _played(url: str, sums: Path) -> None:
    """Eight right answers of a calculator, relabelled as the model's own turns (rows to learn from)."""
    play("math-reflection", episodes=8, seats={"actor": "scripted:calculator", "critic": "scripted:always-correct"},
         tasks=str(sums), split="train", options={"turns": 1}, database_url=url)
    as_model_turns(url, "actor")


def _count(url: str, table: type) -> int:
    engine = open_store(url)
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(table)).scalar_one()
    finally:
        engine.dispose()


def test_build_dataset_returns_the_snapshot_it_registered(lab, sums):
    _played(lab, sums)
    heard = Heard()
    snapshot = build_dataset("sft", role="actor", since="all", database_url=lab, progress=heard)
    assert (str(snapshot.kind), snapshot.role, snapshot.game) == ("sft", "actor", "math-reflection")
    assert snapshot.row_count > 0 and snapshot.episodes_read == 8
    assert snapshot.path.is_file() and len(snapshot.path.read_text().splitlines()) == snapshot.row_count
    assert heard.calls == [("building", "sft", "actor", "math-reflection"), ("built",)]
    assert _count(lab, DatasetSnapshot) == 1

    with pytest.raises(InputError):  # nothing newer than that snapshot: no row, nothing registered
        build_dataset("sft", role="actor", database_url=lab)
    assert _count(lab, DatasetSnapshot) == 1


@pytest.mark.parametrize(("kind", "given", "says"), [
    ("sfd", {}, "unknown dataset kind 'sfd'; kinds: dpo, kto, ppo, sft, reward"),
    ("sft", {"since": "yesterday"}, "use 'latest' or 'all'"),
    ("sft", {"pairs": "all"}, "--pairs applies to dpo rows only, not to sft"),
    ("dpo", {"pairs": "every"}, "--pairs must be 'extremes'"),
    ("sft", {"baseline": "batch"}, "--baseline applies to ppo rows only, not to sft"),
    ("ppo", {"baseline": "episode"}, "--baseline must be one of group, batch"),
    ("sft", {"max_rows": 10}, "--max-rows caps the rows of --verdicts truth only"),
    ("ppo", {"verdicts": "truth"}, "apply to sft rows only, not to ppo"),
    ("sft", {"split": "heldout"}, "--train-on-eval-data"),
])
def test_bad_build_input_raises_before_the_store_is_opened(lab, tmp_path, kind, given, says):
    with pytest.raises(InputError) as refused:
        build_dataset(kind, role="actor", database_url=lab, **given)
    assert says in " ".join(str(refused.value).split())
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "data").exists()


def test_train_builds_its_rows_publishes_a_candidate_and_deploy_gates_it(lab, sums):
    _played(lab, sums)
    heard = Heard()
    trained = train("sft", role="actor", max_steps=1, batch_size=2, database_url=lab, progress=heard)
    assert (trained.kind, trained.role, trained.adapter.name, trained.parent) == ("sft", "actor", "actor@v1", None)
    assert trained.adapter.status == "candidate" and not trained.adapter.is_verifier and trained.screen is None
    assert trained.rows > 0 and trained.dataset == trained.adapter.dataset_snapshot_id
    assert trained.metrics["steps"] == 1 and "loss" in trained.metrics
    assert heard.methods()[:3] == ["building", "built", "training"]
    assert heard.named("training") == [("sft", "actor")] and heard.named("step")[-1] == (1, 1)
    assert _count(lab, TrainingJob) == 1

    heard = Heard()
    gate = deploy("actor", tasks=str(sums), eval_tasks=2, options={"turns": 1}, max_new_tokens=4,
                  seats={"critic": "scripted:always-correct"}, database_url=lab, progress=heard)
    assert (gate.candidate, gate.baseline, gate.metric) == ("actor@v1", "base", "pass@turn-1")
    assert gate.promoted and gate.reason.startswith("promoted actor@v1 against base")  # both equal: margin 0 passes
    assert gate.candidate_eval.episodes == gate.baseline_eval.episodes == 2
    engine = open_store(lab)
    try:
        assert get_version(engine, "actor@v1").status == "active"
    finally:
        engine.dispose()
    [(candidate, sets)] = heard.named("gating")
    assert candidate == "actor@v1" and set(sets.values()) == {2}

    again = train("sft", role="actor", dataset=trained.dataset, max_steps=1, batch_size=2, database_url=lab)
    assert (again.adapter.name, again.parent, again.dataset) == ("actor@v2", "actor@v1", trained.dataset)
    # from a version named, a candidate too, not the active one
    branch = train("sft", role="actor", dataset=trained.dataset, max_steps=1, batch_size=2, parent="actor@v2",
                   database_url=lab)
    assert (branch.adapter.name, branch.parent) == ("actor@v3", "actor@v2")
    for parent, says in (("actor@v9", "parent actor@v9"), ("critic@v1", "parent critic@v1")):
        with pytest.raises(InputError, match=says):
            train("sft", role="actor", dataset=trained.dataset, parent=parent, database_url=lab)
    with pytest.raises(InputError, match="fresh starts a new adapter and parent continues actor@v1"):
        train("sft", role="actor", dataset=trained.dataset, parent="actor@v1", fresh=True, database_url=lab)
    assert _count(lab, TrainingJob) == 3


@pytest.mark.parametrize(("kind", "given", "says"), [
    ("sfd", {}, "sfd"),
    ("sft", {"beta": 0.1}, "--beta does not apply to the sft trainer"),
    ("sft", {"screen": 10}, "--screen chooses the tasks online GRPO plays"),
    ("grpo", {"screen": 0}, "--screen plays at least 1 task"),
    ("sft", {"answers": "critic"}, "--answers applies to `sparring train reward` only"),
    ("reward", {"answers": "actor"}, "Publish the verifier under a role of its own, e.g. --role actor-verifier"),
    ("dpo", {"dataset": 1, "pairs": "all"}, "snapshot 1 is built already"),
    ("ppo", {"dataset": 1, "baseline": "batch"}, "snapshot 1 is built already"),
    ("kto", {"pairs": "all"}, "--pairs applies to dpo rows only, not to kto"),
    ("dpo", {"rpo_alpha": -1.0}, "rpo_alpha"),
    ("sft", {"dataset": 99}, "no dataset snapshot 99"),
    ("sft", {}, "play"),  # nothing logged yet: says to play first
])
def test_bad_train_input_raises_before_a_job_is_recorded(lab, kind, given, says):
    with pytest.raises(InputError) as refused:
        train(kind, role="actor", database_url=lab, **given)
    assert says in " ".join(str(refused.value).split())
    if Path(lab.removeprefix("sqlite:///")).exists():
        assert _count(lab, TrainingJob) == 0 and _count(lab, DatasetSnapshot) == 0


def test_bad_deploy_input_raises_before_anything_is_played(lab):
    with pytest.raises(InputError, match="role 'actor' has no candidate version; train one with"):
        deploy("actor", database_url=lab)
    with pytest.raises(InputError, match="'math-reflection' is registered: its gate plays its held-out tasks"):
        deploy("actor", eval_script="python evaluate.py", database_url=lab)
    with pytest.raises(InputError, match="game 'agents' is not registered .* Give --eval-script"):
        deploy("solver", game="agents", database_url=lab)
    with pytest.raises(InputError, match="--tasks, --seat: game 'agents' is external"):
        deploy("solver", game="agents", tasks="sums.jsonl", seats={"critic": "scripted:echo"}, eval_script="true",
               database_url=lab)
    assert _count(lab, Run) == 0
