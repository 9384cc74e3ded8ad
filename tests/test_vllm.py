"""sparring against a real vLLM CPU server, and the `sparring vllm` command line.

One server for the module, started from the venv of scripts/setup-vllm with the bundled model
(converted to safetensors), the way `sparring vllm` starts it; without that venv the server
tests are skipped, saying so. The model cache is the default one (~/.cache/sparring or
SPARRING_CACHE_DIR), as in tests/test_e2e_bundled.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from transformers import AutoTokenizer
from typer.testing import CliRunner

from app.cli import app
from app.settings import load_settings
from app.vllm_server import vllm_command
from graphs.policies.base import BackendError, GenerationRequest, SamplingParams, UnknownAdapterError
from graphs.policies.base_models import resolve_model
from graphs.policies.openai_backend import OpenAIBackend, RetryPolicy
from model_logs import as_model_turns
from process_groups import stop_group
from storage.engine import open_store
from storage.models import Episode, Turn, TurnPayload
from training.registry import get_version, publish
from vllm_double import free_port

runner = CliRunner()
READY_TIMEOUT_S = 300
HI = [{"role": "user", "content": "What is 12 + 30?"}]


# ------------------------------------------------------------------------- the command line


def test_vllm_command_enables_runtime_lora_with_room_for_two_adapters_per_role():
    env, argv = vllm_command(python="/venv/bin/python", model="/models/smol", served_name="bundled", roles=3,
                             lora_rank=16, host="127.0.0.1", port=8000, extra=("--max-model-len", "2048"))
    assert env == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": "4"}
    assert argv == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/smol",
                    "--served-model-name", "bundled", "--enable-lora", "--max-loras", "6", "--max-lora-rank", "16",
                    "--host", "127.0.0.1", "--port", "8000", "--max-model-len", "2048"]


@pytest.mark.parametrize(("rank", "served_rank"), [(1, "1"), (4, "8"), (16, "16"), (17, "32"), (512, "512")])
def test_lora_rank_is_rounded_up_to_a_rank_vllm_accepts(rank, served_rank):
    _, argv = vllm_command(python="p", model="m", served_name="n", roles=1, lora_rank=rank, host="h", port=1)
    assert argv[argv.index("--max-lora-rank") + 1] == served_rank


def test_vllm_command_refuses_what_vllm_cannot_serve():
    with pytest.raises(ValueError, match="above vLLM's largest --max-lora-rank"):
        vllm_command(python="p", model="m", served_name="n", roles=1, lora_rank=600, host="h", port=1)
    with pytest.raises(ValueError, match="roles must be >= 1"):
        vllm_command(python="p", model="m", served_name="n", roles=0, lora_rank=8, host="h", port=1)


def test_sparring_vllm_prints_the_command_for_the_settings(tmp_path, monkeypatch):
    model = tmp_path / "smol"
    model.mkdir()
    (model / "config.json").write_text("{}")
    monkeypatch.setenv("SPARRING_MODEL", str(model))
    monkeypatch.setenv("SPARRING_SERVED_MODEL_NAME", "smol")
    monkeypatch.setenv("SPARRING_VLLM_URL", "http://0.0.0.0:8123/v1")
    monkeypatch.setenv("SPARRING_VLLM_VENV", str(tmp_path / "venv"))
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "6")  # the user's choice is kept
    result = runner.invoke(app, ["vllm", "--roles", "actor,critic", "--", "--dtype", "bfloat16"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True VLLM_CPU_KVCACHE_SPACE=6 "
        f"{tmp_path}/venv/bin/python -m vllm.entrypoints.openai.api_server --model {model} --served-model-name smol "
        "--enable-lora --max-loras 4 --max-lora-rank 16 --host 0.0.0.0 "
        "--port 8123 --dtype bfloat16"
    )
    result = runner.invoke(app, ["vllm", "--start"])
    assert result.exit_code == 2 and "run scripts/setup-vllm" in result.output


def test_sparring_vllm_start_runs_the_server_in_its_place(tmp_path):
    """--start replaces the sparring process by the vLLM one (here a stand-in that records how it was run)."""
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$VLLM_ALLOW_RUNTIME_LORA_UPDATING $*" > {tmp_path}/ran\n')
    fake.chmod(0o755)
    model = tmp_path / "smol"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = {**os.environ, "SPARRING_MODEL": str(model)}
    sparring = Path(sys.executable).with_name("sparring")
    done = subprocess.run([str(sparring), "vllm", "--start", "--python", str(fake), "--port", "8999"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    ran = (tmp_path / "ran").read_text()
    assert ran.startswith("True -m vllm.entrypoints.openai.api_server --model ") and "--port 8999" in ran


# ----------------------------------------------------------------------------- a real server


def _wait_ready(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the vLLM server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2):
                return
        except OSError:
            time.sleep(1)
    pytest.fail(f"the vLLM server was not ready after {READY_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory) -> Iterator[str]:
    settings = load_settings()
    python = settings.vllm_venv / "bin" / "python"
    if not python.is_file():
        pytest.skip(f"no vLLM venv at {settings.vllm_venv}: run scripts/setup-vllm (about 2 minutes, 3.6 GB)")
    port = free_port()
    env, argv = vllm_command(
        python=str(python),
        model=str(resolve_model("bundled", settings.cache_dir)),
        served_name="bundled",
        roles=2,
        lora_rank=16,
        host="127.0.0.1",
        port=port,
        extra=("--max-model-len", "2048", "--dtype", "bfloat16"),
        cpu_kv_cache_gib="2",
    )
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/v1"
        _wait_ready(url, process, log)
        yield url
    finally:
        stop_group(process, grace_s=30)  # the server and its engine process share its group


@pytest.fixture(scope="module")
def on_vllm(vllm_url, tmp_path_factory) -> Iterator[Path]:
    """Settings for CLI runs whose 'model' seats the server serves: one store and data folder
    for the module (each test reads its own runs); returns the folder."""
    folder = tmp_path_factory.mktemp("on-vllm")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("SPARRING_DATABASE_URL", f"sqlite:///{folder / 'store.db'}")
        env.setenv("SPARRING_DATA_DIR", str(folder / "data"))
        env.setenv("SPARRING_BACKEND", "vllm")
        env.setenv("SPARRING_VLLM_URL", vllm_url)
        env.setenv("SPARRING_REQUEST_RETRIES", "2")
        yield folder


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def play(*args: str) -> dict:
    out = cli("play", "math-reflection", "--turns", "1", "--max-new-tokens", "24", "--format", "json", *args)
    return json.loads(out.strip().splitlines()[-1])[0]


def turns_of(folder: Path, run_id: str) -> list:
    engine = open_store(f"sqlite:///{folder / 'store.db'}")
    with engine.connect() as conn:
        return conn.execute(
            select(Turn.seat, Turn.policy, Turn.served_by, Turn.backend, Turn.completion_tokens,
                   TurnPayload.messages, TurnPayload.prompt_token_ids, TurnPayload.completion_token_ids,
                   TurnPayload.logprobs)
            .join(TurnPayload, TurnPayload.turn_id == Turn.id)
            .where(Turn.episode_id.in_(select(Episode.id).where(Episode.run_id == run_id)))
        ).all()


@pytest.mark.vllm
def test_play_on_vllm_logs_token_ids_and_logprobs(on_vllm):
    summary = play("-n", "3", "-c", "3")
    assert summary["succeeded"] == 3
    turns = turns_of(on_vllm, summary["run_id"])
    assert len(turns) == 6 and {t.seat for t in turns} == {"actor", "critic"}
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("bundled", load_settings().cache_dir))
    for turn in turns:
        assert (turn.backend, turn.served_by, turn.policy) == ("openai", "bundled", "bundled")
        # the prompt ids are the chat template of the logged messages, as the in-process backend makes them
        templated = tokenizer.apply_chat_template(turn.messages, add_generation_prompt=True, return_dict=True)
        assert turn.prompt_token_ids == list(templated["input_ids"])
        # the critic's free part is capped at 24 tokens; its "Verdict: ..." line, chosen by guided choice, comes on top
        most = 24 if turn.seat == "actor" else 24 + 12
        assert 0 < len(turn.completion_token_ids) == len(turn.logprobs) == turn.completion_tokens <= most
        assert all(lp <= 0.0 for lp in turn.logprobs) and tokenizer.eos_token_id not in turn.completion_token_ids


@pytest.fixture(scope="module")
def trained(on_vllm) -> str:
    """actor@v1, trained by `sparring train sft` (one step) on calculator answers and promoted."""
    tasks = on_vllm / "sums.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"What is {a} + {a + 3}?", "answer": f"#### {2 * a + 3}"}) + "\n"
                             for a in range(6)))
    cli("play", "math-reflection", "-n", "6", "--turns", "1", "--tasks", str(tasks), "--split", "train",
        "--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct")
    as_model_turns(f"sqlite:///{on_vllm / 'store.db'}", "actor")  # as a model this good would have left them
    cli("train", "sft", "--role", "actor", "--max-steps", "1", "--batch-size", "2")
    cli("adapters", "promote", "actor@v1")
    return f"sqlite:///{on_vllm / 'store.db'}"


@pytest.mark.vllm
def test_a_trained_adapter_is_deployed_serves_the_next_episodes_and_is_unloaded_once_retired(on_vllm, trained,
                                                                                              vllm_url):
    summary = play("-n", "2", "--seat", "critic=scripted:always-correct")
    served = {(t.policy, t.served_by) for t in turns_of(on_vllm, summary["run_id"]) if t.seat == "actor"}
    assert served == {("bundled+actor@v1", "actor@v1")}
    engine = open_store(trained)
    v1 = get_version(engine, "actor@v1")
    models = _models(vllm_url)
    assert models["actor@v1"] == {"root": str(v1.path.resolve()), "parent": "bundled"}

    # the next version (here the same weights, published again) replaces it; v1 is retired
    v2 = publish(engine, role="actor", trained_dir=v1.path, adapters_root=on_vllm / "data" / "adapters",
                 base_model="bundled", trainer="sft", config={}, parent="actor@v1",
                 dataset_snapshot_id=v1.dataset_snapshot_id, metrics={})
    cli("adapters", "promote", v2.name)
    assert get_version(engine, "actor@v1").status == "retired"
    summary = play("-n", "1", "--seat", "critic=scripted:always-correct")
    assert {t.served_by for t in turns_of(on_vllm, summary["run_id"]) if t.seat == "actor"} == {"actor@v2"}

    backend = OpenAIBackend(base_url=vllm_url, model_name="bundled", retry=RetryPolicy(retries=1))

    async def retire():
        await backend.unload_adapter("actor@v1")
        with pytest.raises(UnknownAdapterError, match="'actor@v1' is not loaded"):
            await backend.generate(GenerationRequest(HI, SamplingParams(max_new_tokens=4), adapter="actor@v1"))
        await backend.aclose()

    asyncio.run(retire())
    assert "actor@v1" not in _models(vllm_url) and "actor@v2" in _models(vllm_url)


@pytest.mark.vllm
def test_loading_an_adapter_twice(on_vllm, trained, vllm_url, tmp_path):
    folder = get_version(open_store(trained), "actor@v1").path
    other = shutil.copytree(folder, tmp_path / "other")

    async def scenario():
        first, second = (OpenAIBackend(base_url=vllm_url, model_name="bundled") for _ in range(2))
        await first.load_adapter("twice@v1", str(folder))
        await first.load_adapter("twice@v1", str(folder))  # no-op
        await second.load_adapter("twice@v1", str(folder))  # no-op too: /v1/models' root is this folder
        with pytest.raises(BackendError, match="already loaded from .*adapter names are immutable"):
            await second.load_adapter("twice@v1", str(other))
        result = await second.generate(GenerationRequest(HI, SamplingParams(temperature=0, max_new_tokens=8),
                                                         adapter="twice@v1"))
        await first.unload_adapter("twice@v1")
        await first.aclose(), await second.aclose()
        return result

    result = asyncio.run(scenario())
    assert result.served_by == "twice@v1" and len(result.completion_token_ids) == len(result.logprobs) > 0


@pytest.mark.vllm
def test_unknown_adapter_and_missing_folder_are_clear_errors(vllm_url, tmp_path):
    backend = OpenAIBackend(base_url=vllm_url, model_name="bundled", retry=RetryPolicy(retries=0))

    async def scenario():
        with pytest.raises(UnknownAdapterError, match="'critic@v404' is not loaded.*Deploy it first"):
            await backend.generate(GenerationRequest(HI, adapter="critic@v404"))
        with pytest.raises(BackendError, match="could not load adapter 'critic@v404'.*No adapter found"):
            await backend.load_adapter("critic@v404", str(tmp_path / "missing"))
        await backend.aclose()

    asyncio.run(scenario())


def _models(url: str) -> dict[str, dict]:
    with urllib.request.urlopen(f"{url}/models", timeout=10) as answer:
        return {m["id"]: {"root": m["root"], "parent": m["parent"]} for m in json.load(answer)["data"]}
