"""Decode steps with the backend's growing KV cache against transformers' DynamicCache.

For each batch size B and cached length L: the bundled model (or SPARRING_MODEL) prefills B
random prompts of L tokens, then runs --steps greedy decode steps, once with transformers'
``DynamicCache`` (every step concatenates each layer's keys and values: a copy of the whole
cache) and once with ``graphs.policies.kv_cache.GrowingCache`` (the in-process backend's:
new positions written into spare room). Prints the median milliseconds a step, the ratio,
and whether both chose the same tokens. The dtype is the one the backend serves in.

    python -m bench.kv_cache                       # B = 64 200, L = 100 300 (7 min on 2 CPU cores)
    python -m bench.kv_cache --batches 200 --lengths 171 --steps 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import DynamicCache

from app import api
from bench.common import note, print_table
from graphs.policies.base_models import load_model
from graphs.policies.kv_cache import GrowingCache


@torch.inference_mode()
def decode(model, cache, prompts: torch.Tensor, steps: int) -> tuple[float, torch.Tensor]:
    """Median seconds of a decode step after the prefill, and the tokens chosen."""
    out = model(input_ids=prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
    chosen, seconds = [], []
    for _ in range(steps):
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        chosen.append(token)
        started = time.perf_counter()
        out = model(input_ids=token, past_key_values=cache, use_cache=True, logits_to_keep=1)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), torch.cat(chosen, dim=1)


def main() -> None:
    settings = api.settings()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 200], help="rows decoding together")
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 300], help="prompt tokens cached before")
    parser.add_argument("--steps", type=int, default=16, help="decode steps timed in each cell")
    args = parser.parse_args()

    model, _ = load_model(settings.model, cache_dir=settings.cache_dir, device="cpu", dtype=settings.dtype,
                          serving=True)
    note(f"model={settings.model} dtype={model.dtype} threads={torch.get_num_threads()} steps={args.steps}")
    rows = []
    for batch in args.batches:
        for length in args.lengths:
            prompts = torch.randint(0, model.config.vocab_size, (batch, length),
                                    generator=torch.Generator().manual_seed(batch * length))
            dynamic, expected = decode(model, DynamicCache(config=model.config), prompts, args.steps)
            growing, got = decode(model, GrowingCache(model.config), prompts, args.steps)
            rows.append([batch, length, 1000 * dynamic, 1000 * growing, dynamic / growing,
                         "yes" if torch.equal(expected, got) else "no"])
    print_table(["rows", "cached", "DynamicCache ms", "growing ms", "speed-up", "same tokens"], rows)


if __name__ == "__main__":
    main()
