"""Batch-invariant bfloat16 against float32 and plain bfloat16: speed, and whether rows move.

The in-process backend serves N first prompts of the math game (the `unseen` arithmetic
problems, greedy, the main job's evaluation length of 160 new tokens) all at once, three ways:
float32 (how evaluations that decide play on a CPU without native bfloat16), bfloat16 with
torch's own kernels, and bfloat16 made batch-invariant (``graphs.policies.batch_invariant``).
Then it serves K of the prompts again, each alone, and counts the prompts whose answer (its
tokens) differs from the batch's, and those whose logprobs differ at all (bit for bit). Prints
tokens/s, the ratio to float32 measured in the same run, and those counts.

    python -m bench.batch_invariance                  # N=128, K=16
    python -m bench.batch_invariance --prompts 64 --alone 8

Without native bfloat16 instructions (AVX512-BF16 or AMX) bfloat16 is emulated and slow: the
bfloat16 rows are left out unless --emulated.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from app.settings import load_settings
from bench.common import note, print_table
from graphs.policies.base import GenerationRequest, GenerationResult, SamplingParams
from graphs.policies.base_models import load_model
from graphs.policies.cpu_precision import native_bf16_cpu
from graphs.policies.inprocess import InProcessBackend
from graphs.registry import get_game
from graphs.tasks import load_tasks

SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=160)
WAYS = (("float32", torch.float32, False), ("bfloat16", torch.bfloat16, False),
        ("bfloat16, batch-invariant", torch.bfloat16, True))


def ways_to_time(ways: tuple, emulated: bool) -> tuple:
    """``ways`` (float32 first), only float32 on a CPU that would emulate bfloat16 unless
    ``emulated``; says so."""
    if native_bf16_cpu() or emulated:
        return ways
    note("this CPU has no native bfloat16: only float32 is measured (--emulated measures bfloat16 anyway)")
    return ways[:1]


async def serve(backend: InProcessBackend, prompts: list) -> list[GenerationResult]:
    return await asyncio.gather(*(backend.generate(GenerationRequest(p, SAMPLING)) for p in prompts))


async def measure(way: tuple[str, torch.dtype, bool], prompts: list, alone: int, cache_dir: Path) -> list:
    name, dtype, invariant = way
    model, tokenizer = load_model("bundled", cache_dir=cache_dir, device="cpu", dtype=dtype)
    backend = InProcessBackend(model, tokenizer, model_name="bundled", max_batch_size=len(prompts),
                               batch_invariant=invariant)
    try:
        await serve(backend, prompts[:2])  # warm-up
        start = time.perf_counter()
        batch = await serve(backend, prompts)
        seconds = time.perf_counter() - start
        answers = logprobs = 0
        for i in range(alone):
            (single,) = await serve(backend, prompts[i:i + 1])
            answers += single.completion_token_ids != batch[i].completion_token_ids
            logprobs += single.logprobs != batch[i].logprobs
    finally:
        await backend.aclose()
    tokens = sum(len(r.completion_token_ids) for r in batch)
    note(f"{name}: {tokens} tokens in {seconds:.1f} s")
    return [name, tokens / seconds, seconds, f"{answers} of {alone}", f"{logprobs} of {alone}"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=128, help="prompts served at once (N)")
    parser.add_argument("--alone", type=int, default=16, help="prompts served again alone (K)")
    parser.add_argument("--emulated", action="store_true", help="measure bfloat16 without native instructions")
    args = parser.parse_args()
    game = get_game("math-reflection")
    prompts = [game.first_prompt(t) for t in load_tasks("arithmetic", n=args.prompts, seed=0, split="unseen")]
    ways = ways_to_time(WAYS, args.emulated)
    rows = [await measure(way, prompts, min(args.alone, args.prompts), load_settings().cache_dir) for way in ways]
    base = rows[0][1]
    print(f"{args.prompts} prompts at once, greedy, at most {SAMPLING.max_new_tokens} new tokens; "
          f"{torch.get_num_threads()} threads")
    print_table(["precision", "tokens/s", "seconds", "vs float32", "answers moved", "logprobs moved"],
                [[r[0], r[1], r[2], r[1] / base, r[3], r[4]] for r in rows])


if __name__ == "__main__":
    asyncio.run(main())
