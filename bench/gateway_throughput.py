"""Tokens/s through `sparring gateway` against the in-process backend called directly, on the same requests.

In one run, for each concurrency N (1, 16, 64): N clients each send --rounds chat requests one
after another (greedy, max_tokens --max-new-tokens, a prompt per client), first straight to an
``InProcessBackend`` in this process (``backend.generate``, the call `sparring play` makes), then
through the gateway: real ``openai.AsyncOpenAI`` clients against `sparring gateway` running as its
own process on a free loopback port, logging every call as a turn into a fresh SQLite file.
Completion tokens are counted as answered (``usage.completion_tokens`` through the gateway);
the table shows both rates and gateway / direct (issue 40's goal: at least 0.8 at 16 and 64).

By default the model is a tiny random Llama (2 layers, the bundled tokenizer, written to a
temporary folder): its steps are so cheap that the figures weigh the gateway's own cost (HTTP,
JSON, the recorder) far more than a real model's would. Random weights never end a reply early,
so every request generates its full budget on both sides. ``--model bundled`` (or any model
path) measures a real model.

    python -m bench.gateway_throughput
    python -m bench.gateway_throughput --sizes 1 16 --rounds 1 --max-new-tokens 16
    python -m bench.gateway_throughput --model bundled --device cuda
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx
import openai
import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from app import api
from bench.common import note, print_table
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.base_models import bundled_gguf_path
from graphs.policies.inprocess import InProcessBackend

STARTUP_S = 300


def tiny_random_model(folder: Path) -> Path:
    """A 2-layer Llama at seeded random weights with the bundled tokenizer (read from the GGUF: no weights)."""
    gguf = bundled_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def prompt(client: int, round_: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Client {client}, question {round_}: count from {client} to {client + 9}."}]


async def direct(backend: InProcessBackend, size: int, rounds: int, max_new_tokens: int) -> tuple[int, float]:
    """(completion tokens, seconds) of ``size`` clients calling the backend directly."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)

    async def client(i: int) -> int:
        results = [await backend.generate(GenerationRequest(prompt(i, r), sampling)) for r in range(rounds)]
        return sum(len(result.completion_token_ids) for result in results)

    started = time.perf_counter()
    tokens = await asyncio.gather(*(client(i) for i in range(size)))
    return sum(tokens), time.perf_counter() - started


async def through_gateway(base_url: str, size: int, rounds: int, max_new_tokens: int) -> tuple[int, float]:
    """(completion tokens, seconds) of ``size`` AsyncOpenAI clients calling the gateway."""
    limits = httpx.Limits(max_connections=size + 4, max_keepalive_connections=size + 4)
    async with httpx.AsyncClient(limits=limits, timeout=600) as http:
        api = openai.AsyncOpenAI(base_url=base_url, api_key="none", max_retries=0, http_client=http)

        async def client(i: int) -> int:
            tokens = 0
            for r in range(rounds):
                reply = await api.chat.completions.create(model="base", messages=prompt(i, r), temperature=0,
                                                          max_tokens=max_new_tokens)
                tokens += reply.usage.completion_tokens
            return tokens

        started = time.perf_counter()
        tokens = await asyncio.gather(*(client(i) for i in range(size)))
        return sum(tokens), time.perf_counter() - started


def start_gateway(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """`sparring gateway` on ``port``, answering /v1/models (its model loaded)."""
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "gateway", "--port", str(port)], env=env,
                              cwd=Path(__file__).resolve().parents[1])
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the gateway exited with status {server.returncode} before it served")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"the gateway did not answer within {STARTUP_S} s")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder, hub id or 'bundled' (default: a tiny random "
                        "model made for the run)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, ... (default cpu)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=2, help="requests each client sends, one after another")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="sparring-gateway-bench-") as tmp:
        folder = Path(tmp)
        model = args.model or str(tiny_random_model(folder / "tiny"))
        env = {**os.environ, "SPARRING_MODEL": model, "SPARRING_DEVICE": args.device,
               "SPARRING_DATABASE_URL": f"sqlite:///{folder / 'gateway.db'}", "SPARRING_DATA_DIR": str(folder / "data"),
               "SPARRING_MAX_BATCH_SIZE": str(max(args.sizes))}
        settings = api.settings(model=model, device=args.device)
        backend = InProcessBackend.from_pretrained(model, cache_dir=settings.cache_dir, device=args.device,
                                                   max_batch_size=max(args.sizes))
        port = free_port()
        note(f"starting `sparring gateway` on port {port}…")
        server = start_gateway(env, port)
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            asyncio.run(direct(backend, 1, 1, 4))  # warm-ups
            asyncio.run(through_gateway(base_url, 1, 1, 4))
            print(f"model {args.model or 'tiny random Llama (2 layers)'} · {args.device} · greedy · max_new_tokens "
                  f"{args.max_new_tokens} · {args.rounds} request(s) per client · torch threads "
                  f"{torch.get_num_threads()}")
            rows = []
            for size in args.sizes:
                note(f"{size} client(s)…")
                tokens, seconds = asyncio.run(direct(backend, size, args.rounds, args.max_new_tokens))
                gw_tokens, gw_seconds = asyncio.run(through_gateway(base_url, size, args.rounds, args.max_new_tokens))
                rate, gw_rate = tokens / seconds, gw_tokens / gw_seconds
                rows.append([size, tokens, rate, gw_tokens, gw_rate, gw_rate / rate])
            print_table(["clients", "direct tok", "direct tok/s", "gateway tok", "gateway tok/s", "gateway/direct"],
                        rows)
        finally:
            server.terminate()
            server.wait(timeout=60)
            asyncio.run(backend.aclose())


if __name__ == "__main__":
    main()
