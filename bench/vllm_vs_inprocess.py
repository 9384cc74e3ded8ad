"""Throughput of the vLLM backend (a vLLM CPU server) vs the in-process backend, same prompts.

The same arithmetic prompts (those of backend_throughput.py) are served greedily, at most
--concurrency requests in flight at once, first by the in-process backend, then by the
OpenAI-compatible backend against a vLLM server started here from the venv of
scripts/setup-vllm (or the server at --url). Only completion tokens before EOS count. Prints
tokens/s of each and the ratio vLLM / in-process, measured in this one run.

    python -m bench.vllm_vs_inprocess                       # bundled model, CPU, concurrency 16
    python -m bench.vllm_vs_inprocess --url http://127.0.0.1:8000/v1 --served-model-name bundled

On CPU, vLLM keeps one core for its server process and runs the model on the others (one on
a 2-core machine); the in-process backend uses every core torch sees, or --threads.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from app import api
from app.vllm_server import vllm_command
from bench.backend_throughput import prompts
from graphs.policies.base import Backend, GenerationRequest, Message, SamplingParams
from graphs.policies.base_models import resolve_model
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.openai_backend import OpenAIBackend


async def serve(backend: Backend, batch: list[list[Message]], concurrency: int, max_new_tokens: int) -> float:
    """Tokens/s serving ``batch`` with at most ``concurrency`` requests in flight."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    gate = asyncio.Semaphore(concurrency)

    async def one(messages: list[Message]) -> int:
        async with gate:
            return len((await backend.generate(GenerationRequest(messages, sampling))).completion_token_ids)

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(m) for m in batch)))
    return tokens / (time.perf_counter() - start)


def start_server(python: Path, model: str, port: int, dtype: str, log: Path) -> subprocess.Popen:
    env, argv = vllm_command(python=str(python), model=model, served_name="bench", roles=1, lora_rank=16,
                             host="127.0.0.1", port=port, extra=("--max-model-len", "2048", "--dtype", dtype),
                             cpu_kv_cache_gib="2")
    with log.open("wb") as out:
        return subprocess.Popen(argv, env={**os.environ, **env}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def wait_ready(url: str, server: subprocess.Popen, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the vLLM server exited with {server.returncode}; its log:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"{url}/models", timeout=2).close()
            return
        except OSError:
            time.sleep(1)
    sys.exit(f"the vLLM server was not ready after {timeout_s:.0f} s; its log: {log}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs per backend")
    parser.add_argument("--dtype", default="bfloat16", help="vLLM's --dtype (the in-process backend runs float32)")
    parser.add_argument("--url", help="use this running vLLM server instead of starting one")
    parser.add_argument("--served-model-name", default="bench", help="with --url: the server's model name")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--threads", type=int, help="torch threads of the in-process backend (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the server when killed
    settings = api.settings()
    batch = prompts(args.prompts, seed=16)

    local = InProcessBackend.from_pretrained(args.model, cache_dir=settings.cache_dir, device="cpu",
                                             max_batch_size=args.concurrency)
    await serve(local, prompts(2), 2, 4)  # warm-up
    print(f"model={args.model} prompts={args.prompts} concurrency={args.concurrency} max_new_tokens="
          f"{args.max_new_tokens} greedy; in-process float32 on {torch.get_num_threads()} threads, vLLM {args.dtype}")
    print(f"{'backend':>12} {'tok/s':>8}", flush=True)
    inprocess = max([await serve(local, batch, args.concurrency, args.max_new_tokens) for _ in range(args.repeats)])
    print(f"{'in-process':>12} {inprocess:>8.1f}", flush=True)
    await local.aclose()

    server = None
    url = args.url
    if url is None:
        python = settings.vllm_venv / "bin" / "python"
        if not python.is_file():
            sys.exit(f"no vLLM venv at {settings.vllm_venv}: run scripts/setup-vllm, or pass --url")
        log = Path(tempfile.mkdtemp(prefix="sparring-bench-vllm-")) / "server.log"
        url = f"http://127.0.0.1:{args.port}/v1"
        server = start_server(python, str(resolve_model(args.model, settings.cache_dir)), args.port, args.dtype, log)
    try:
        if server is not None:
            wait_ready(url, server, log)
        remote = OpenAIBackend(base_url=url, model_name=args.served_model_name if args.url else "bench")
        await serve(remote, prompts(2), 2, 4)  # warm-up
        vllm = max([await serve(remote, batch, args.concurrency, args.max_new_tokens) for _ in range(args.repeats)])
        await remote.aclose()
    finally:
        if server is not None and server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)

    print(f"{'vLLM':>12} {vllm:>8.1f}")
    print(f"vLLM / in-process: {vllm / inprocess:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
