"""Throughput of the in-process backend vs raw ``model.generate`` on the same prompts.

For each concurrency N, rounds of N short arithmetic prompts are served greedily (max_new_tokens
64; at least --min-prompts prompts in all): by the backend (N concurrent ``generate`` calls a
round, which it batches, up to the largest N at once) and by raw ``model.generate`` (one
left-padded call a round). Only real completion tokens count (up to and excluding EOS /
padding). Prints a table of tokens/s and the ratio backend / raw.

Model, cache folder and device default to the settings (SPARRING_MODEL, SPARRING_CACHE_DIR,
SPARRING_DEVICE: ``auto`` is CUDA when there is a GPU). On CUDA the model runs in bfloat16
and N defaults to larger batches.

    python -m bench.backend_throughput                 # bundled model; CPU: N = 1 16 64, CUDA: 1 64 256
    python -m bench.backend_throughput --sizes 1 8 --repeats 1
    python -m bench.backend_throughput --device cuda --sizes 1 128 512
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from app import api
from graphs.policies.base import GenerationRequest, Message, SamplingParams
from graphs.policies.base_models import load_model, resolve_device
from graphs.policies.inprocess import InProcessBackend

CPU_SIZES = [1, 16, 64]
CUDA_SIZES = [1, 64, 256]


def prompts(n: int, seed: int = 0) -> list[list[Message]]:
    rng = random.Random(seed)
    templates = [
        "What is {a} + {b}?",
        "Compute {a} * {b}. Give the final answer as 'Answer: <number>'.",
        "Tom has {a} apples and buys {b} more. How many apples does he have now?",
        "What is {a} - {b}? Explain briefly.",
    ]
    return [
        [
            {
                "role": "user",
                "content": rng.choice(templates).format(a=rng.randint(2, 99), b=rng.randint(2, 99)),
            }
        ]
        for _ in range(n)
    ]


def raw_generate(model, tokenizer, batch: list[list[Message]], max_new_tokens: int) -> list[list[int]]:
    texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in batch]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    with torch.inference_mode():
        out = model.generate(
            **inputs, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
        )
    eos = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    completions = []
    for row in out[:, inputs["input_ids"].shape[1] :].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        completions.append(row[:cut])
    return completions


async def backend_generate(
    backend: InProcessBackend, batch: list[list[Message]], max_new_tokens: int
) -> list[list[int]]:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens)
    results = await asyncio.gather(*(backend.generate(GenerationRequest(m, sampling)) for m in batch))
    return [r.completion_token_ids for r in results]


async def main() -> None:
    settings = api.settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=settings.model)
    parser.add_argument("--cache-dir", type=Path, default=settings.cache_dir)
    parser.add_argument("--device", default=settings.device, help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--dtype", default="auto", help="auto (bfloat16 on CUDA, else float32), float16...")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        help=f"concurrent requests N, the largest being the backend's batch size "
        f"(default: {' '.join(map(str, CPU_SIZES))} on CPU, {' '.join(map(str, CUDA_SIZES))} on CUDA)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs per cell")
    parser.add_argument("--min-prompts", type=int, default=8, help="N below this serves several rounds of N")
    args = parser.parse_args()
    if args.sizes is None:
        args.sizes = CUDA_SIZES if resolve_device(args.device).type == "cuda" else CPU_SIZES

    model, tokenizer = load_model(args.model, cache_dir=args.cache_dir, device=args.device, dtype=args.dtype)
    backend = InProcessBackend(model, tokenizer, model_name=args.model, max_batch_size=max(args.sizes))
    raw_generate(model, tokenizer, prompts(2), 4)  # warm-up
    await backend_generate(backend, prompts(2), 4)

    print(
        f"model={args.model} device={model.device} dtype={model.dtype} threads={torch.get_num_threads()} "
        f"max_new_tokens={args.max_new_tokens} (greedy; tokens/s counts completion tokens before EOS)"
    )
    print(
        f"{'N':>4} {'prompts':>8} {'tokens':>7} {'raw tok/s':>10} {'backend tok/s':>14} "
        f"{'backend/raw':>12} {'same ids':>9}"
    )
    for n in args.sizes:
        chunks = [prompts(n, seed=n * 1000 + i) for i in range(max(1, args.min_prompts // n))]
        raw_best = ours_best = 0.0
        for _ in range(args.repeats):
            start = time.perf_counter()
            raw = [
                ids for chunk in chunks for ids in raw_generate(model, tokenizer, chunk, args.max_new_tokens)
            ]
            raw_best = max(raw_best, sum(map(len, raw)) / (time.perf_counter() - start))
            start = time.perf_counter()
            ours = [
                ids for chunk in chunks for ids in await backend_generate(backend, chunk, args.max_new_tokens)
            ]
            ours_best = max(ours_best, sum(map(len, ours)) / (time.perf_counter() - start))
        same = sum(a == b for a, b in zip(raw, ours, strict=True))
        print(
            f"{n:>4} {len(ours):>8} {sum(map(len, ours)):>7} {raw_best:>10.1f} {ours_best:>14.1f} "
            f"{ours_best / raw_best:>11.2f}x {same:>5}/{len(ours)}"
        )
    stats = backend.stats
    print(
        f"backend: {stats.batches} batches, mean batch size {stats.mean_batch_size:.1f}, "
        f"{stats.decode_steps} forward passes, {stats.generated_tokens} tokens"
    )
    await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
