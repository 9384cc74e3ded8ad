"""Rollout throughput of `play` against the raw batched-generate limit, and logging overhead.

In one run, on the configured model (bundled SmolLM2-135M by default) and device (CPU, or a GPU
with ``SPARRING_DEVICE=cuda``; ``bench/random_model.py`` makes a model where the weights cannot go):

* raw limit: one left-padded greedy ``model.generate`` over B actor prompts (B = 1, 16, 64;
  B = 1 runs a few prompts one after another), counting real completion tokens;
* play: ``math-reflection`` with every turn played (actor, critic, actor, critic), greedy, at
  concurrency C = B, logged to a fresh SQLite file; generated tokens / wall time;
* raw on the same work: the play's own requests, read back from its store, through raw
  ``model.generate`` turn by turn (every episode's first actor prompt, then every first
  critic prompt...) in batches of C, as static batching would play them: the same prompts
  and token budget, so ``play / same-work raw`` is what the backend, LangGraph, the rules judge
  and the recorder cost (the first ratio also counts the critic's long prompts, which the
  actor-only baseline never prefills);
* logging: the same concurrency-16 play with the real recorder vs a recorder that drops
  everything (`NullRecorder`), alternated and repeated; the median wall times are compared;
* compute limit: tokens/s if every forward pass ran at the machine's matmul peak in the
  model's dtype (bfloat16 where the CPU multiplies it natively; measured on a large square
  matmul on the model's device, with torch's threads on a CPU), at 2 x parameters FLOPs per
  token (prompt tokens not counted: the figure is a ceiling, not what is reachable), and
  each measured rate as a fraction of it.

The play figure is the honest one for users: it includes the critic's longer prompts, the
rules judge, LangGraph and the recorder, which the actor-only raw baseline does not pay for.

    python -m bench.play_throughput
    python -m bench.play_throughput --sizes 1 16 --max-new-tokens 48 --repeats 1
    python -m bench.play_throughput --sizes 64 --repeats 0      # concurrency 64 only, no logging figure
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from app import api
from bench.backend_throughput import raw_generate
from bench.common import note
from graphs.episodes import play
from graphs.math_reflection.options import ReflectionOptions
from graphs.math_reflection.prompts import actor_messages
from graphs.policies.base import SamplingParams
from graphs.policies.cpu_precision import native_bf16_cpu
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.policy import Policy
from graphs.registry import get_game
from graphs.tasks import load_tasks
from storage.bench_rows import turn_messages
from storage.engine import open_store
from storage.recorder import NullRecorder, Recorder

SEQUENTIAL_PROMPTS = 4
MATMUL_SIZE = 2048


def matmul_size(device: torch.device) -> int:
    """A square matmul big enough to reach the device's peak: 2048 on a CPU, 8192 on a GPU."""
    return MATMUL_SIZE if device.type == "cpu" else 4 * MATMUL_SIZE


EMULATED_BFLOAT16 = ("this CPU has no bfloat16 instructions (AVX512-BF16 or AMX): its bfloat16 products are "
                     "emulated, many times slower than float32")


def precisions_to_time(asked: Sequence[str] | None, default: Sequence[str]) -> list[str]:
    """The precisions a benchmark times: those ``asked``, else ``default`` without bfloat16 on a
    CPU that would emulate it (hours for a training benchmark); says which."""
    if asked is not None:
        if "bfloat16" in asked:
            note_emulated_bfloat16()
        return list(asked)
    if "bfloat16" in default and not native_bf16_cpu():
        note(f"bfloat16 left out ({EMULATED_BFLOAT16}); name it in --settings to time it anyway")
        return [name for name in default if name != "bfloat16"]
    return list(default)


def note_emulated_bfloat16() -> None:
    """Say, on a CPU without bfloat16 instructions, that bfloat16 will be slow here."""
    if not native_bf16_cpu():
        note(EMULATED_BFLOAT16[0].upper() + EMULATED_BFLOAT16[1:])


def matmul_peak_flops(dtype: torch.dtype, device: torch.device, seconds: float = 2.0) -> float:
    """FLOP/s of a square matmul in ``dtype`` on ``device`` (the CPU with torch's threads, or a
    GPU, synchronised around each product), best of several runs."""
    size = matmul_size(device)
    a, b = (torch.randn(size, size, dtype=dtype, device=device) for _ in range(2))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a @ b  # warm-up
    sync()
    best, deadline = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def raw_tokens_per_s(backend: InProcessBackend, tasks, size: int, max_new_tokens: int) -> float:
    model, tokenizer = backend.model, backend.tokenizer  # the bench measures the same weights
    prompts = [actor_messages(t.question) for t in tasks]
    batches = [prompts[i : i + 1] for i in range(SEQUENTIAL_PROMPTS)] if size == 1 else [prompts[:size]]
    raw_generate(model, tokenizer, batches[0], 4)  # warm-up
    started, tokens = time.perf_counter(), 0
    for batch in batches:
        tokens += sum(len(c) for c in raw_generate(model, tokenizer, batch, max_new_tokens))
    return tokens / (time.perf_counter() - started)


def played_waves(engine, episode_ids: list[str]) -> list[list[list[dict]]]:
    """The messages of each request the play made, grouped by turn index (wave 0: every
    episode's first actor prompt, wave 1: the critic prompts that followed...), in episode order."""
    order = {e: i for i, e in enumerate(episode_ids)}
    waves: dict[int, list[tuple[int, list[dict]]]] = {}
    for episode_id, idx, messages in turn_messages(engine, episode_ids):
        waves.setdefault(idx, []).append((order[episode_id], messages))
    return [[m for _, m in sorted(waves[i], key=lambda pair: pair[0])] for i in sorted(waves)]


def same_work_tokens_per_s(backend: InProcessBackend, waves, size: int, max_new_tokens: int) -> float:
    """Raw ``generate`` over the play's own requests, wave after wave, ``size`` prompts a batch."""
    model, tokenizer = backend.model, backend.tokenizer
    raw_generate(model, tokenizer, waves[0][:size], 4)  # warm-up
    started, tokens = time.perf_counter(), 0
    for wave in waves:
        for i in range(0, len(wave), size):
            tokens += sum(len(c) for c in raw_generate(model, tokenizer, wave[i : i + size], max_new_tokens))
    return tokens / (time.perf_counter() - started)


def play_once(backend, tasks, concurrency: int, max_new_tokens: int, sink) -> tuple[float, float, list[str]]:
    """(tokens/s, wall seconds, episode ids) of one play."""
    backend.stats = type(backend.stats)()
    game = get_game("math-reflection")
    policy = Policy(backend, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    options = ReflectionOptions(turns=2, stop_on_correct=False)
    report = asyncio.run(
        play(game, tasks, {"actor": policy, "critic": policy}, sink, concurrency=concurrency, seed=0, options=options)
    )
    if hasattr(sink, "flush"):
        sink.flush()
    if report.count("succeeded") != len(tasks):
        raise SystemExit(f"bench play had failures: {[e.error for e in report.episodes if e.error][:3]}")
    return report.tokens_per_s, report.wall_s, [e.episode_id for e in report.episodes]


def logging_overhead(backend, engine, tasks, size: int, args: argparse.Namespace) -> None:
    walls: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(args.repeats):
        with Recorder(engine) as recorder:
            walls["on"].append(play_once(backend, tasks[:size], size, args.max_new_tokens, recorder)[1])
        walls["off"].append(play_once(backend, tasks[:size], size, args.max_new_tokens, NullRecorder())[1])
    on, off = statistics.median(walls["on"]), statistics.median(walls["off"])
    print(f"logging at concurrency {size}: recorder on {on:.2f} s, off {off:.2f} s, "
          f"overhead {100 * (on / off - 1):+.1f}% (median of {args.repeats})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="alternated recorder on/off pairs (0: skip)")
    parser.add_argument("--join-rows", type=int, default=None, help="the backend's join_rows (default: its own)")
    parser.add_argument("--join-wait-steps", type=int, default=None, help="the backend's join_wait_steps")
    args = parser.parse_args()

    settings = api.settings()
    backend = InProcessBackend.from_pretrained(
        settings.model, cache_dir=settings.cache_dir, device=settings.device, max_batch_size=max(args.sizes)
    )
    if args.join_rows is not None:
        backend.join_rows = args.join_rows
    if args.join_wait_steps is not None:
        backend.join_wait_steps = args.join_wait_steps
    tasks = load_tasks("arithmetic", n=max(args.sizes), seed=0, split="heldout")
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_store(f"sqlite:///{Path(tmp) / 'bench.db'}")
        params = sum(p.numel() for p in backend.model.parameters())
        dtype, device = next(backend.model.parameters()).dtype, backend.model.device
        peak = matmul_peak_flops(dtype, device)
        limit = peak / (2 * params)
        print(f"model {settings.model} · greedy · max_new_tokens {args.max_new_tokens} · torch threads "
              f"{torch.get_num_threads()} · join rows {backend.join_rows}, wait {backend.join_wait_steps} steps")
        print(f"compute limit: {params / 1e6:.1f} M params x 2 = {2 * params / 1e9:.2f} GFLOP/token; "
              f"{str(dtype).removeprefix('torch.')} matmul peak on {device} {peak / 1e9:.1f} GFLOP/s "
              f"({matmul_size(device)}^2) "
              f"-> {limit:.0f} tok/s")
        print("raw: actor prompts only; same: the play's own requests, turn by turn (tok/s)")
        print(f"{'C':>3} {'raw':>7} {'same':>7} {'play':>7} {'play/raw':>9} {'play/same':>10} "
              f"{'play/limit':>11} {'rows/step':>10}")
        for size in args.sizes:
            raw = raw_tokens_per_s(backend, tasks, size, args.max_new_tokens)
            episodes = tasks[: max(size, SEQUENTIAL_PROMPTS)]
            with Recorder(engine) as recorder:
                rate, _, episode_ids = play_once(backend, episodes, size, args.max_new_tokens, recorder)
            rows_per_step = backend.stats.mean_rows_per_step
            same = same_work_tokens_per_s(backend, played_waves(engine, episode_ids), size, args.max_new_tokens)
            print(f"{size:>3} {raw:>7.1f} {same:>7.1f} {rate:>7.1f} {rate / raw:>9.2f} {rate / same:>10.2f} "
                  f"{rate / limit:>11.1%} {rows_per_step:>10.1f}")
        if args.repeats >= 1:
            logging_overhead(backend, engine, tasks, 16 if 16 in args.sizes else args.sizes[-1], args)
    asyncio.run(backend.aclose())


if __name__ == "__main__":
    main()
