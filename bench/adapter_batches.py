"""What LoRA adapters cost the in-process backend: batches of the base model alone, of one
adapter, and of rows that mix adapters, in float32 and in batch-invariant bfloat16.

A gate plays a candidate adapter beside the base model (or beside another role's adapter) in
one batch, so evaluations that decide run the mixed set-ups. Two LoRA adapters of the trainer's
default shape (rank 16 on every linear layer but the output head, random weights scaled down so
answers stay text) are loaded on the bundled model; N first prompts of the math game (greedy,
160 new tokens) are served at once four ways: every row on the base model, every row on adapter
a, half on a and half on the base model, and thirds on a, b and the base model, each R times.
Prints the best of the R tokens/s (a shared machine's slow spells left out) and its ratio to the
base model alone in the same precision, measured in the same run.

    python -m bench.adapter_batches                 # N=64, R=3
    python -m bench.adapter_batches --prompts 32 --repeats 1

Without native bfloat16 instructions only float32 is measured (unless --emulated).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from app.settings import load_settings
from bench.batch_invariance import ways_to_time
from bench.common import note, print_table
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.base_models import load_model
from graphs.policies.inprocess import InProcessBackend
from graphs.registry import get_game
from graphs.tasks import load_tasks

SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=160)
WAYS = (("float32", torch.float32, False), ("bfloat16, batch-invariant", torch.bfloat16, True))
MIXES = (("base model alone", (None,)), ("adapter a alone", ("a",)),
         ("a and the base model", ("a", None)), ("a, b and the base model", ("a", "b", None)))
B_SCALE = 0.05
"""PEFT's random B (``init_lora_weights=False``) is as large as a trained layer's weights; scaled
down, the adapters change answers without turning them into noise."""


def write_adapters(cache_dir: Path, folder: Path) -> dict[str, Path]:
    """Two random LoRA adapters of the trainer's default shape for the bundled model."""
    from peft import LoraConfig, get_peft_model

    model, _ = load_model("bundled", cache_dir=cache_dir, device="cpu", dtype=torch.float32)
    paths = {}
    for seed, name in enumerate(("a", "b")):
        torch.manual_seed(seed)
        config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", init_lora_weights=False,
                            task_type="CAUSAL_LM")
        peft = get_peft_model(model, config)
        with torch.no_grad():
            for param_name, param in peft.named_parameters():
                if "lora_B" in param_name:
                    param.mul_(B_SCALE)
        paths[name] = folder / name
        peft.save_pretrained(str(paths[name]))
        model = peft.unload()  # the base model again, for the next adapter
    return paths


async def measure(way: tuple[str, torch.dtype, bool], prompts: list, adapters: dict[str, Path],
                  cache_dir: Path, repeats: int) -> list[list]:
    name, dtype, invariant = way
    model, tokenizer = load_model("bundled", cache_dir=cache_dir, device="cpu", dtype=dtype)
    backend = InProcessBackend(model, tokenizer, model_name="bundled", max_batch_size=len(prompts),
                               batch_invariant=invariant)
    rows = []
    try:
        for adapter, path in adapters.items():
            await backend.load_adapter(adapter, str(path))
        for label, mix in MIXES:
            requests = [GenerationRequest(p, SAMPLING, adapter=mix[i % len(mix)]) for i, p in enumerate(prompts)]
            await asyncio.gather(*(backend.generate(r) for r in requests[:2]))  # warm-up
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                results = await asyncio.gather(*(backend.generate(r) for r in requests))
                times.append(time.perf_counter() - start)
            seconds = min(times)
            tokens = sum(len(r.completion_token_ids) for r in results)
            note(f"{name}, {label}: {tokens} tokens in {', '.join(f'{t:.1f}' for t in times)} s")
            rows.append([name, label, tokens / seconds, seconds])
    finally:
        await backend.aclose()
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64, help="prompts served at once (N)")
    parser.add_argument("--repeats", type=int, default=3, help="times each batch is served (R); the best counts")
    parser.add_argument("--emulated", action="store_true", help="measure bfloat16 without native instructions")
    args = parser.parse_args()
    cache_dir = load_settings().cache_dir
    game = get_game("math-reflection")
    prompts = [game.first_prompt(t) for t in load_tasks("arithmetic", n=args.prompts, seed=0, split="unseen")]
    ways = ways_to_time(WAYS, args.emulated)
    with tempfile.TemporaryDirectory(prefix="sparring-bench-adapters-") as folder:
        adapters = write_adapters(cache_dir, Path(folder))
        table = []
        for way in ways:
            rows = await measure(way, prompts, adapters, cache_dir, args.repeats)
            table += [[*r, r[2] / rows[0][2]] for r in rows]
    print(f"{args.prompts} prompts at once, greedy, at most {SAMPLING.max_new_tokens} new tokens, best of "
          f"{args.repeats}; {torch.get_num_threads()} threads; adapters: rank 16 on every linear layer")
    print_table(["precision", "rows' adapters", "tokens/s", "seconds", "vs base alone"], table)


if __name__ == "__main__":
    asyncio.run(main())
