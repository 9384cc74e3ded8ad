"""`sparring adapters export`: a published adapter as a folder that plain PEFT (and so lm-eval
and vLLM) loads, on a tiny random Llama; the bundled model's case uses a prepared cache folder
in place of the converted SmolLM2 (no real model is loaded)."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from tiny_model import save_random_lora, save_tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from app.cli import app
from graphs.policies.adapter_folder import WEIGHTS_FILE
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.base_models import _COMPLETE_MARKER, BUNDLED, bundled_gguf_path, gguf_cache_key, load_model
from graphs.policies.inprocess import InProcessBackend
from storage.engine import open_store
from training.export_adapter import ExportError, export_adapter
from training.registry import get_version, publish

runner = CliRunner()
PROMPT = [{"role": "user", "content": "What is 12 + 30?"}]


def _publish_random_adapter(engine, tmp_path: Path, base: Path, base_model: str):
    """A random LoRA for the model in ``base``, published as actor@v1 with ``base_model`` recorded."""
    trained = save_random_lora(AutoModelForCausalLM.from_pretrained(base), tmp_path / "trained", seed=3)
    config = json.loads((trained / "adapter_config.json").read_text())
    (trained / "adapter_config.json").write_text(json.dumps(config | {"base_model_name_or_path": base_model}))
    return publish(engine, role="actor", trained_dir=trained, adapters_root=tmp_path / "adapters",
                   base_model=base_model, trainer="sft", config={}, parent=None, dataset_snapshot_id=None,
                   metrics={"loss": 1.0})


@pytest.fixture
def published(tmp_path: Path):
    """(store URL, base model folder, actor@v1 published on it by its folder path)."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    base = save_tiny_model(tmp_path / "base")
    return url, base, _publish_random_adapter(open_store(url), tmp_path, base, str(base))


def _served_by_sparring(base_model: str, record, cache_dir: Path):
    """Greedy tokens and their logprobs as sparring serves the published version (load_model,
    then the in-process backend's load_adapter)."""
    model, tokenizer = load_model(base_model, cache_dir=cache_dir, device="cpu")
    backend = InProcessBackend(model, tokenizer, model_name="base")

    async def run():
        try:
            await backend.load_adapter(record.name, str(record.path))
            return await backend.generate(
                GenerationRequest(PROMPT, SamplingParams(temperature=0.0, max_new_tokens=8), record.name)
            )
        finally:
            await backend.aclose()

    return asyncio.run(run())


def _logprobs(model, prompt_ids: list[int], completion_ids: list[int]) -> torch.Tensor:
    """Log-probability of each completion token, teacher-forced through ``model``."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion_ids)[:, None]).squeeze(-1)


def test_plain_peft_loads_the_export_and_computes_what_sparring_serves(published, tmp_path):
    url, base, record = published
    served = _served_by_sparring(str(base), record, tmp_path / "cache")
    exported = export_adapter(record, tmp_path / "export", cache_dir=tmp_path / "cache")

    config = json.loads((exported.folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base.resolve()) == exported.base_model
    assert (exported.folder / WEIGHTS_FILE).read_bytes() == (record.path / WEIGHTS_FILE).read_bytes()
    # plain PEFT and transformers, given nothing but the export's own files
    plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"]),
                                      exported.folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(exported.folder)
    assert tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_dict=True)["input_ids"] == \
        served.prompt_token_ids
    logprobs = _logprobs(plain, served.prompt_token_ids, served.completion_token_ids)
    assert torch.allclose(logprobs, torch.tensor(served.logprobs), atol=1e-4), (logprobs, served.logprobs)
    with torch.no_grad(), plain.disable_adapter():  # the adapter is what makes the difference
        base_logprobs = _logprobs(plain, served.prompt_token_ids, served.completion_token_ids)
    assert not torch.allclose(base_logprobs, logprobs, atol=1e-2)

    merged = export_adapter(record, tmp_path / "merged", cache_dir=tmp_path / "cache", merged=True)
    assert not (merged.folder / "adapter_config.json").exists()
    full = AutoModelForCausalLM.from_pretrained(merged.folder).eval()
    ids = torch.tensor([served.prompt_token_ids + served.completion_token_ids])
    with torch.no_grad():
        # (W + BA)x rounds differently from Wx + BAx: up to ~3e-4 on logits of size ~8 in float32
        # (it depends on the CPU's kernels), where the adapter itself moves them by ~10
        assert torch.allclose(full(input_ids=ids).logits, plain(input_ids=ids).logits, atol=1e-3)
    assert AutoTokenizer.from_pretrained(merged.folder).get_vocab() == tokenizer.get_vocab()


def test_a_bundled_adapter_names_the_converted_folder(tmp_path):
    """"bundled" in the published config becomes the folder sparring converted the GGUF into."""
    converted = tmp_path / "cache" / "models" / gguf_cache_key(bundled_gguf_path())
    save_tiny_model(converted)  # stands in for the conversion of SmolLM2 (same tokenizer, random weights)
    (converted / _COMPLETE_MARKER).write_text("prepared by the test\n")
    record = _publish_random_adapter(open_store(f"sqlite:///{tmp_path / 'store.db'}"), tmp_path, converted, BUNDLED)
    assert json.loads((record.path / "adapter_config.json").read_text())["base_model_name_or_path"] == BUNDLED

    exported = export_adapter(record, tmp_path / "export", cache_dir=tmp_path / "cache")
    config = json.loads((exported.folder / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(converted.resolve())
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(config["base_model_name_or_path"]),
                                      exported.folder)
    assert "actor" not in model.peft_config and model.peft_config["default"].r == 4


def test_export_refuses_a_folder_in_use_and_replaces_it_with_force(published, tmp_path):
    _, base, record = published
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty.*--force"):
        export_adapter(record, tmp_path / "busy", cache_dir=tmp_path / "cache")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    export_adapter(record, tmp_path / "busy", cache_dir=tmp_path / "cache", force=True)
    assert (tmp_path / "busy" / WEIGHTS_FILE).is_file() and not (tmp_path / "busy" / "notes.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".busy.")]  # no staging folder left
    for kept in (record.path.parent, base):  # never replaced, even with --force
        with pytest.raises(ExportError, match="which the export would replace"):
            export_adapter(record, kept, cache_dir=tmp_path / "cache", force=True)
    assert (record.path / WEIGHTS_FILE).is_file() and (base / "config.json").is_file()


def _cli(url: str, tmp_path: Path, *args: str):
    env = {"SPARRING_DATABASE_URL": url, "SPARRING_CACHE_DIR": str(tmp_path / "cache")}
    return runner.invoke(app, ["adapters", "export", *args], env=env)


def test_cli_prints_the_lm_eval_and_vllm_lines(published, tmp_path):
    url, base, record = published
    result = _cli(url, tmp_path, "actor@v1", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    lines = [shlex.split(line) for line in result.stdout.splitlines()]
    folder = str(tmp_path / "out")
    assert lines[0][:5] == ["lm_eval", "--model", "hf", "--model_args", f"pretrained={base.resolve()},peft={folder}"]
    assert lines[1] == ["vllm", "serve", str(base.resolve()), "--enable-lora", "--max-lora-rank", "8",
                        "--lora-modules", f"actor@v1={folder}"]

    merged = _cli(url, tmp_path, str(record.id), str(tmp_path / "merged"), "--merged")
    assert merged.exit_code == 0, merged.output
    assert [shlex.split(line)[:3] for line in merged.stdout.splitlines()] == [
        ["lm_eval", "--model", "hf"], ["vllm", "serve", str(tmp_path / "merged")]]
    assert f"pretrained={tmp_path / 'merged'}" in merged.stdout


def test_cli_errors_name_the_problem_and_the_fix(published, tmp_path):
    url, _, record = published
    unknown = _cli(url, tmp_path, "actor@v9", str(tmp_path / "x"))
    assert unknown.exit_code == 2 and "actor@v9" in unknown.output and "Traceback" not in unknown.output
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "a").write_text("")
    busy = _cli(url, tmp_path, "actor@v1", str(tmp_path / "full"))
    assert busy.exit_code == 1 and "--force" in busy.output
    (record.path / WEIGHTS_FILE).write_bytes(b"truncated")
    broken = _cli(url, tmp_path, "actor@v1", str(tmp_path / "y"))
    assert broken.exit_code == 1 and "Traceback" not in broken.output
    assert "changed since publishing" in " ".join(broken.output.split())
    assert not (tmp_path / "y").exists()
    assert get_version(open_store(url), "actor@v1").status == "candidate"
