"""The adapter registry on real databases: publishing (atomic, concurrent, with lineage),
status changes, rollback and checks of published folders.

Each test runs on a SQLite file and on a fresh PostgreSQL database (see conftest.py). The
adapters are random LoRA weights for a one-layer Llama, saved by PEFT as a trainer would.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from tiny_model import save_random_lora
from transformers import LlamaConfig, LlamaForCausalLM

import training.adapter_folders as adapter_folders
import training.registry as registry
from graphs.policies.adapter_folder import AdapterFolderError
from storage.engine import in_transaction, session_scope
from storage.models import AdapterStatus, AdapterVersion, DatasetSnapshot
from training.adapter_folders import verify_folder
from training.registry import (
    AdapterRecord,
    RegistryError,
    TransitionError,
    UnknownVersionError,
    active_version,
    get_version,
    list_versions,
    promote,
    publish,
    reject,
    rollback,
)

CONFIG = {"learning_rate": 1e-4, "beta": 0.1, "lora": {"r": 4}}
METRICS = {"loss": 0.5, "steps": 10}
WEIGHTS = "adapter_model.safetensors"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local base model folder (its config is enough: PEFT reads it when saving)."""
    folder = tmp_path_factory.mktemp("base")
    LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    ).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, base_model: str) -> Path:
    """A trainer's output folder, made once: a random LoRA adapter saved by PEFT."""
    model = LlamaForCausalLM(LlamaConfig.from_pretrained(base_model))
    model.config.name_or_path = base_model
    return save_random_lora(model, tmp_path_factory.mktemp("trained") / "out", seed=1)


@dataclass
class Lab:
    """A store, a trained adapter folder and an adapters root, with publish's arguments."""

    engine: Engine
    trained: Path
    root: Path
    base_model: str

    def publish(self, role: str = "critic", **overrides: Any) -> AdapterRecord:
        arguments: dict[str, Any] = {
            "role": role,
            "trained_dir": self.trained,
            "adapters_root": self.root,
            "base_model": self.base_model,
            "trainer": "dpo",
            "config": CONFIG,
            "parent": None,
            "dataset_snapshot_id": None,
            "metrics": METRICS,
        }
        return publish(self.engine, **{**arguments, **overrides})

    def trained_copy(self, name: str) -> Path:
        """Another trained folder, told apart by a marker file holding ``name``."""
        folder = self.trained.parent / name
        shutil.copytree(self.trained, folder)
        (folder / "marker.txt").write_text(name)
        return folder


@pytest.fixture
def lab(store: Engine, template: Path, tmp_path: Path, base_model: str) -> Lab:
    trained = tmp_path / "trained" / "out"
    shutil.copytree(template, trained)
    return Lab(store, trained, tmp_path / "adapters", base_model)


def statuses(engine: Engine, role: str = "critic") -> dict[str, AdapterStatus]:
    return {v.name: v.status for v in list_versions(engine, role)}


def root_entries(root: Path) -> list[str]:
    return sorted(entry.name for entry in root.iterdir()) if root.exists() else []


def edit_config(folder: Path, **changes: Any) -> None:
    config_file = folder / "adapter_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **changes}))


def truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


# --- publishing -----------------------------------------------------------------------------


def test_publish_copies_the_folder_then_registers_a_candidate_with_its_lineage(lab: Lab) -> None:
    with session_scope(lab.engine) as session:
        snapshot = DatasetSnapshot(
            kind="dpo", role="critic", game="debate", base_model=lab.base_model, filter_spec={},
            watermark=None, row_count=3, path="/data/critic-dpo.parquet",
        )  # fmt: skip
        session.add(snapshot)
        session.flush()
        snapshot_id = snapshot.id
    (lab.trained / "checkpoint-10").mkdir()
    (lab.trained / "checkpoint-10" / "optimizer.pt").write_bytes(b"trainer state")

    first = lab.publish(dataset_snapshot_id=snapshot_id)

    assert (first.name, first.role, first.version, first.status) == ("critic@v1", "critic", 1, "candidate")
    assert first.path == lab.root / "critic@v1"
    assert (first.base_model, first.trainer, first.config) == (lab.base_model, "dpo", CONFIG)
    assert (first.parent_id, first.dataset_snapshot_id) == (None, snapshot_id)
    assert first.eval == {"training": METRICS}
    assert first.created_at.tzinfo is not None and first.promoted_at is None
    assert root_entries(lab.root) == ["critic@v1"]  # no temporary folder left
    assert root_entries(first.path) == ["README.md", "SHA256SUMS", "adapter_config.json", WEIGHTS]
    for name in ("README.md", "adapter_config.json", WEIGHTS):
        assert (first.path / name).read_bytes() == (lab.trained / name).read_bytes()
    assert (lab.trained / WEIGHTS).is_file()  # the trainer's folder is copied, not moved
    verify_folder(first.path, base_model=lab.base_model)

    second = lab.publish(parent="critic@v1", trainer="kto", metrics={"loss": 0.25})
    other = lab.publish(role="actor")

    assert (second.name, second.parent_id, second.trainer, second.eval) == (
        "critic@v2", first.id, "kto", {"training": {"loss": 0.25}}
    )
    assert other.name == "actor@v1"
    assert get_version(lab.engine, "critic@v2") == second
    assert get_version(lab.engine, second.id) == get_version(lab.engine, str(second.id)) == second
    assert [v.name for v in list_versions(lab.engine)] == ["actor@v1", "critic@v1", "critic@v2"]
    assert list_versions(lab.engine, "critic", "candidate") == [first, second]
    assert list_versions(lab.engine, status=AdapterStatus.ACTIVE) == []
    assert active_version(lab.engine, "critic") is None


def test_a_published_folder_loads_as_the_same_peft_adapter(lab: Lab) -> None:
    published = lab.publish()

    def base() -> LlamaForCausalLM:
        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig.from_pretrained(lab.base_model)).eval()

    inputs = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        plain = base()(inputs).logits
        adapted = PeftModel.from_pretrained(base(), published.path)(inputs).logits
        expected = PeftModel.from_pretrained(base(), lab.trained)(inputs).logits
    assert not torch.allclose(adapted, plain)
    assert torch.equal(adapted, expected)


def test_versions_increase_and_skip_folders_that_a_crash_left_unregistered(lab: Lab) -> None:
    assert [lab.publish().version for _ in range(2)] == [1, 2]
    orphan = lab.root / "critic@v3"  # renamed into place, then the process died before the insert
    shutil.copytree(lab.trained, orphan)
    (orphan / "marker.txt").write_text("orphan")

    assert lab.publish().name == "critic@v4"
    assert (orphan / "marker.txt").read_text() == "orphan"  # never overwritten nor reused
    assert list(statuses(lab.engine)) == ["critic@v1", "critic@v2", "critic@v4"]


@pytest.mark.parametrize("shared_root", [True, False], ids=["one-root", "two-roots"])
def test_concurrent_publishes_of_a_role_get_distinct_versions(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, shared_root: bool
) -> None:
    """Both publishes read the highest version before either renames one, so both try v1:
    with one adapters root the second rename fails; with two roots on one database (two
    machines) the second insert does. Either way the second publish takes v2."""
    barrier = threading.Barrier(2, timeout=30)
    seen = threading.local()
    highest_on_disk = registry.highest_version_on_disk  # read after the highest registered one

    def highest_read_together(root: Path, role: str) -> int:
        found = highest_on_disk(root, role)
        if not getattr(seen, "once", False):
            seen.once = True
            barrier.wait()
        return found

    monkeypatch.setattr(registry, "highest_version_on_disk", highest_read_together)
    outcomes: list[object] = []  # of every rename and insert
    for step in ("place", "_register"):
        real = getattr(registry, step)
        monkeypatch.setattr(registry, step, lambda *args, real=real: outcomes.append(real(*args)) or outcomes[-1])
    roots = {name: lab.root if shared_root else lab.root.parent / f"root-{name}" for name in ("a", "b")}

    def publish_copy(name: str) -> AdapterRecord:
        return lab.publish(trained_dir=lab.trained_copy(name), adapters_root=roots[name], trainer=name)

    with ThreadPoolExecutor(2) as pool:
        records = list(pool.map(publish_copy, ["a", "b"]))

    assert sorted(r.version for r in records) == [1, 2]
    assert (False in outcomes) is shared_root and (None in outcomes) is not shared_root  # one lost the race
    for record in records:
        assert record.path.parent == roots[record.trainer]
        assert (record.path / "marker.txt").read_text() == record.trainer
        verify_folder(record.path, base_model=lab.base_model)
        assert root_entries(record.path.parent) == (["critic@v1", "critic@v2"] if shared_root else [record.name])
    assert list(statuses(lab.engine)) == ["critic@v1", "critic@v2"]


def _remove(folder: Path) -> None:
    shutil.rmtree(folder)


def _write_config(folder: Path, text: str) -> None:
    (folder / "adapter_config.json").write_text(text)


def _pickled_weights_only(folder: Path) -> None:
    (folder / WEIGHTS).rename(folder / "adapter_model.bin")


def _no_lora_tensors(folder: Path) -> None:
    save_file({k.replace("lora_", "other_"): v for k, v in load_file(folder / WEIGHTS).items()}, folder / WEIGHTS)


BROKEN_FOLDERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "missing": (_remove, "does not exist"),
    "no-config": (lambda f: (f / "adapter_config.json").unlink(), "has no adapter_config.json"),
    "config-not-json": (lambda f: _write_config(f, '{"peft_type": "LORA",'), "is not valid JSON"),
    "config-not-an-object": (lambda f: _write_config(f, "[]"), "is not a JSON object"),
    "not-lora": (lambda f: edit_config(f, peft_type="PREFIX_TUNING"), "peft_type 'PREFIX_TUNING', not 'LORA'"),
    "other-base-model": (
        lambda f: edit_config(f, base_model_name_or_path="someone/else"),
        "for the base model 'someone/else'",
    ),
    "no-base-model": (lambda f: edit_config(f, base_model_name_or_path=None), "for the base model None"),
    "no-weights": (lambda f: (f / WEIGHTS).unlink(), f"has no {WEIGHTS}"),
    "pickled-weights": (_pickled_weights_only, "save with safe_serialization=True"),
    "truncated-weights": (lambda f: truncate(f / WEIGHTS), "not a readable safetensors file"),
    "weights-not-safetensors": (lambda f: (f / WEIGHTS).write_bytes(b"\x00" * 64), "not a readable safetensors"),
    "no-lora-tensors": (_no_lora_tensors, "holds no LoRA tensors"),
}


def test_a_broken_trained_folder_is_rejected_before_anything_is_written(lab: Lab) -> None:
    for problem, (breaker, message) in BROKEN_FOLDERS.items():
        trained = lab.trained.parent / problem
        shutil.copytree(lab.trained, trained)
        breaker(trained)
        with pytest.raises(AdapterFolderError, match="trained adapter folder") as caught:
            lab.publish(trained_dir=trained)
        assert str(trained) in str(caught.value) and message in str(caught.value), problem
    assert root_entries(lab.root) == []
    assert list_versions(lab.engine) == []


def test_invalid_arguments_and_lineage_are_rejected_before_anything_is_written(lab: Lab) -> None:
    with session_scope(lab.engine) as session:
        session.add(
            AdapterVersion(
                role="critic", version=1, name="critic@v1", base_model="another/model", trainer="dpo",
                config={}, path="/elsewhere/critic@v1",
            )
        )  # fmt: skip
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"role": "critic v2"}, RegistryError, "invalid role 'critic v2'"),
        ({"role": "critic@v2"}, RegistryError, "invalid role"),
        ({"config": {"output_dir": Path("/tmp")}}, RegistryError, "config cannot be stored as JSON"),
        ({"metrics": {"loss": math.nan}}, RegistryError, "metrics cannot be stored as JSON"),
        ({"parent": "critic@v9"}, UnknownVersionError, "no adapter version is named 'critic@v9'"),
        ({"parent": "critic"}, UnknownVersionError, "expected ROLE@vN"),
        ({"parent": "critic@v1"}, RegistryError, "is an adapter for 'another/model'"),
        ({"dataset_snapshot_id": 999}, RegistryError, "dataset snapshot 999 is not in the store"),
    ]
    for overrides, error, message in cases:
        with pytest.raises(error, match=message):
            lab.publish(**overrides)
    assert root_entries(lab.root) == []
    assert list(statuses(lab.engine)) == ["critic@v1"]


def _fail_on_second_file(monkeypatch: pytest.MonkeyPatch, lab: Lab) -> type[BaseException]:
    copy_file = adapter_folders._copy_file
    copied: list[Path] = []

    def copy_then_fail(source: Path, target: Path) -> str:
        if copied:
            raise OSError(errno.ENOSPC, "No space left on device")
        copied.append(source)
        return copy_file(source, target)

    monkeypatch.setattr(adapter_folders, "_copy_file", copy_then_fail)
    return OSError


def _fail_rename(monkeypatch: pytest.MonkeyPatch, lab: Lab) -> type[BaseException]:
    def failing(staged: Path, final: Path) -> bool:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(registry, "place", failing)
    return OSError


def _fail_sync_after_rename(monkeypatch: pytest.MonkeyPatch, lab: Lab) -> type[BaseException]:
    fsync_dir = adapter_folders._fsync_dir

    def failing_on_root(folder: Path) -> None:
        if folder == lab.root:
            raise OSError(errno.EIO, "Input/output error")
        fsync_dir(folder)

    monkeypatch.setattr(adapter_folders, "_fsync_dir", failing_on_root)
    return OSError


def _fail_insert(monkeypatch: pytest.MonkeyPatch, lab: Lab) -> type[BaseException]:
    def failing(*args: Any) -> AdapterRecord:
        raise RuntimeError("injected: the insert failed")

    monkeypatch.setattr(registry, "_insert", failing)
    return RuntimeError


def _interrupt_insert(monkeypatch: pytest.MonkeyPatch, lab: Lab) -> type[BaseException]:
    def interrupted(*args: Any) -> AdapterRecord:
        raise KeyboardInterrupt

    monkeypatch.setattr(registry, "_insert", interrupted)
    return KeyboardInterrupt


FAILURES = {
    "copy": _fail_on_second_file,
    "rename": _fail_rename,
    "sync-after-rename": _fail_sync_after_rename,
    "insert": _fail_insert,
    "interrupted-insert": _interrupt_insert,
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_publish_that_fails_midway_leaves_no_row_no_folder_and_the_active_version(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    active = promote(lab.engine, lab.publish().name)
    error = FAILURES[failure](monkeypatch, lab)

    with pytest.raises(error):
        lab.publish()

    assert root_entries(lab.root) == ["critic@v1"]
    assert list_versions(lab.engine) == [active]
    verify_folder(active.path, base_model=lab.base_model)
    monkeypatch.undo()
    assert lab.publish().name == "critic@v2"  # the failed attempt used up no version


def test_a_registration_whose_answer_was_lost_keeps_its_folder(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    register = registry._register

    def committed_then_failed(engine: Engine, row: dict[str, Any]) -> AdapterRecord | None:
        register(engine, row)
        raise ConnectionError("injected: the connection dropped before the commit was acknowledged")

    monkeypatch.setattr(registry, "_register", committed_then_failed)
    with pytest.raises(ConnectionError):
        lab.publish()

    registered = get_version(lab.engine, "critic@v1")
    verify_folder(registered.path, base_model=lab.base_model)


def test_an_insert_retried_after_its_commit_was_lost_returns_the_registered_version(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """in_transaction retries after a lost connection; the first attempt had committed, so
    the retry hits the unique name, and the row found is this publish's own."""
    insert = registry._insert
    attempts: list[str] = []

    def committed_then_lost(conn: Connection, row: dict[str, Any]) -> AdapterRecord:
        attempts.append(row["name"])
        if len(attempts) == 1:
            in_transaction(lab.engine, lambda other: insert(other, row))
            raise OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))
        return insert(conn, row)

    monkeypatch.setattr(registry, "_insert", committed_then_lost)
    published = lab.publish()

    assert (published.name, attempts) == ("critic@v1", ["critic@v1", "critic@v1"])
    assert list_versions(lab.engine) == [published]
    verify_folder(published.path, base_model=lab.base_model)


def test_a_failed_publish_keeps_its_folder_when_the_registry_cannot_tell_whether_it_is_registered(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fail_insert(monkeypatch, lab)

    def store_gone(conn: Connection, name: str) -> AdapterRecord | None:
        raise InterfaceError("SELECT", {}, Exception("the connection is closed"))

    monkeypatch.setattr(registry, "_find_name", store_gone)
    with pytest.raises(RuntimeError, match="injected"):
        lab.publish()
    assert root_entries(lab.root) == ["critic@v1"] and list_versions(lab.engine) == []

    monkeypatch.undo()
    assert lab.publish().name == "critic@v2"  # the unregistered folder is left alone


def test_stale_temporary_folders_are_removed_and_young_ones_left_alone(lab: Lab) -> None:
    lab.root.mkdir()
    stale, young = lab.root / ".tmp-crashed", lab.root / ".tmp-running"
    for folder in (stale, young):
        shutil.copytree(lab.trained, folder)
    an_hour_and_more_ago = time.time() - adapter_folders.STALE_TMP_S - 60
    for entry in (*stale.iterdir(), stale):
        os.utime(entry, (an_hour_and_more_ago, an_hour_and_more_ago))

    assert lab.publish().name == "critic@v1"
    assert root_entries(lab.root) == [".tmp-running", "critic@v1"]


# --- status changes -------------------------------------------------------------------------


def test_promote_reject_and_rollback_move_statuses_with_one_active_version(lab: Lab) -> None:
    actor = promote(lab.engine, lab.publish(role="actor").name)
    for _ in range(4):
        lab.publish()

    first = promote(lab.engine, "critic@v1", eval={"win_rate": 0.5})
    assert (first.status, first.eval) == ("active", {"training": METRICS, "gate": {"win_rate": 0.5}})
    assert first.promoted_at is not None
    assert active_version(lab.engine, "critic") == first == get_version(lab.engine, "critic@v1")

    second = promote(lab.engine, "critic@v2")
    assert second.eval == {"training": METRICS}
    assert second.promoted_at is not None and second.promoted_at > first.promoted_at
    rejected = reject(lab.engine, "critic@v3", eval={"win_rate": 0.3})
    assert (rejected.status, rejected.eval["gate"]) == ("rejected", {"win_rate": 0.3})
    assert statuses(lab.engine) == {
        "critic@v1": "retired", "critic@v2": "active", "critic@v3": "rejected", "critic@v4": "candidate"
    }  # fmt: skip

    assert rollback(lab.engine, "critic").name == "critic@v1"
    assert statuses(lab.engine)["critic@v2"] == "retired"
    assert rollback(lab.engine, "critic").name == "critic@v2"  # a second rollback undoes the first
    promote(lab.engine, "critic@v4")
    assert rollback(lab.engine, "critic").name == "critic@v2"  # the version active before v4
    assert rollback(lab.engine, "critic", to="critic@v1").name == "critic@v1"
    assert statuses(lab.engine) == {
        "critic@v1": "active", "critic@v2": "retired", "critic@v3": "rejected", "critic@v4": "retired"
    }  # fmt: skip
    assert active_version(lab.engine, "actor") == actor


def test_transitions_the_lifecycle_forbids_raise_and_change_nothing(lab: Lab) -> None:
    for _ in range(4):
        lab.publish()
    lab.publish(role="actor")
    promote(lab.engine, "critic@v1")
    promote(lab.engine, "critic@v2")
    reject(lab.engine, "critic@v3", eval={"win_rate": 0.1})
    promote(lab.engine, "actor@v1")
    before = list_versions(lab.engine)

    cases: list[tuple[Callable[[], object], type[Exception], str]] = [
        (lambda: promote(lab.engine, "critic@v2"), TransitionError, "critic@v2: active → active.*active already"),
        (lambda: promote(lab.engine, "critic@v1"), TransitionError, "retired → active.*adapters rollback critic"),
        (lambda: promote(lab.engine, "critic@v3"), TransitionError, "rejected → active.*publish a new version"),
        (lambda: reject(lab.engine, "critic@v2", eval={}), TransitionError, "active → rejected.*rollback critic"),
        (lambda: reject(lab.engine, "critic@v1", eval={}), TransitionError, "retired → rejected"),
        (lambda: reject(lab.engine, "critic@v3", eval={}), TransitionError, "rejected → rejected"),
        (lambda: rollback(lab.engine, "critic", to="critic@v4"), TransitionError, "candidate → active.*by promote"),
        (lambda: rollback(lab.engine, "critic", to="critic@v3"), TransitionError, "rollback critic@v3: rejected"),
        (lambda: rollback(lab.engine, "critic", to="actor@v1"), UnknownVersionError, "'critic' is named 'actor@v1'"),
        (lambda: rollback(lab.engine, "actor"), RegistryError, "no retired version to go back to"),
        (lambda: rollback(lab.engine, "nobody"), RegistryError, "no version of 'nobody' has been published"),
        (lambda: promote(lab.engine, "critic@v9"), UnknownVersionError, "critic@v4 candidate"),
        (lambda: promote(lab.engine, "critic"), UnknownVersionError, "not an adapter version name"),
        (lambda: promote(lab.engine, "critic@v4", eval={"x": math.inf}), RegistryError, "eval cannot be stored"),
        (lambda: get_version(lab.engine, 999), UnknownVersionError, "no adapter version has id 999"),
        (lambda: get_version(lab.engine, "critic@v9"), UnknownVersionError, "no adapter version is named"),
        (lambda: list_versions(lab.engine, status="live"), RegistryError, "unknown adapter status 'live'"),
    ]
    for call, error, message in cases:
        with pytest.raises(error, match=message):
            call()
    assert list_versions(lab.engine) == before


def test_concurrent_promotes_of_a_role_leave_one_active_version(lab: Lab) -> None:
    names = [lab.publish().name for _ in range(4)]
    barrier = threading.Barrier(len(names), timeout=30)

    def promote_together(name: str) -> AdapterRecord:
        barrier.wait()
        return promote(lab.engine, name)

    with ThreadPoolExecutor(len(names)) as pool:
        promoted = list(pool.map(promote_together, names))

    active = active_version(lab.engine, "critic")
    assert active is not None and active.promoted_at == max(r.promoted_at for r in promoted if r.promoted_at)
    assert len({r.promoted_at for r in promoted}) == len(names)
    assert statuses(lab.engine) == {name: "active" if name == active.name else "retired" for name in names}


# --- published folders ----------------------------------------------------------------------


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "deleted": (_remove, "the folder .* is missing"),
    "truncated": (lambda f: truncate(f / WEIGHTS), f"{WEIGHTS} in .* has changed since publishing"),
    "file-deleted": (lambda f: (f / "adapter_config.json").unlink(), "adapter_config.json is missing from"),
    "checksums-deleted": (lambda f: (f / "SHA256SUMS").unlink(), "has no SHA256SUMS"),
}


def test_verify_folder_names_the_version_of_a_damaged_folder_and_what_to_do(lab: Lab) -> None:
    for (breaker, message), published in zip(DAMAGE.values(), [lab.publish() for _ in DAMAGE], strict=True):
        verify_folder(published.path, base_model=lab.base_model)
        breaker(published.path)
        with pytest.raises(AdapterFolderError, match=message) as caught:
            verify_folder(published.path, base_model=lab.base_model)
        assert str(caught.value).startswith(f"adapter {published.name}: ")
        assert "`sparring adapters rollback critic`" in str(caught.value)


def test_verify_folder_refuses_a_folder_for_another_base_model(lab: Lab) -> None:
    published = lab.publish()
    with pytest.raises(AdapterFolderError, match="adapter critic@v1 holds an adapter for the base model"):
        verify_folder(published.path, base_model="another/model")
