"""Rollout throughput of `play` against the raw batched-generate limit, and logging overhead.

In one run, on the configured model (bundled SmolLM2-135M by default, CPU):

* raw limit: one left-padded greedy ``model.generate`` over B actor prompts (B = 1, 16, 64;
  B = 1 runs a few prompts one after another), counting real completion tokens;
* play: ``math-reflection`` with every turn played (actor, critic, actor, critic), greedy, at
  concurrency C = B, logged to a fresh SQLite file; generated tokens / wall time;
* logging: the same concurrency-16 play with the real recorder vs a recorder that drops
  everything (`NullRecorder`), alternated and repeated; the median wall times are compared.

The play figure is the honest one for users: it includes the critic's longer prompts, the
verifier, LangGraph and the recorder, which the raw baseline does not pay for.

    python bench/play_throughput.py
    python bench/play_throughput.py --sizes 1 16 --max-new-tokens 48 --repeats 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.settings import load_settings  # noqa: E402
from bench.backend_throughput import raw_generate  # noqa: E402
from graphs.math_reflection.options import ReflectionOptions  # noqa: E402
from graphs.games import get_game  # noqa: E402
from graphs.math_reflection.prompts import actor_messages  # noqa: E402
from graphs.policies.base import SamplingParams  # noqa: E402
from graphs.policies.inprocess import InProcessBackend  # noqa: E402
from graphs.policies.policy import Policy  # noqa: E402
from graphs.runner import play  # noqa: E402
from graphs.tasks import load_tasks  # noqa: E402
from storage.engine import open_store  # noqa: E402
from storage.recorder import NullRecorder, Recorder  # noqa: E402

SEQUENTIAL_PROMPTS = 4


def raw_tokens_per_s(backend: InProcessBackend, tasks, size: int, max_new_tokens: int) -> float:
    model, tokenizer = backend.model, backend.tokenizer  # the bench measures the same weights
    prompts = [actor_messages(t.question) for t in tasks]
    batches = [prompts[i : i + 1] for i in range(SEQUENTIAL_PROMPTS)] if size == 1 else [prompts[:size]]
    raw_generate(model, tokenizer, batches[0], 4)  # warm-up
    started, tokens = time.perf_counter(), 0
    for batch in batches:
        tokens += sum(len(c) for c in raw_generate(model, tokenizer, batch, max_new_tokens))
    return tokens / (time.perf_counter() - started)


def play_once(backend, tasks, concurrency: int, max_new_tokens: int, sink) -> tuple[float, float]:
    """(tokens/s, wall seconds) of one play."""
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
    return report.tokens_per_s, report.wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="alternated recorder on/off pairs")
    args = parser.parse_args()

    settings = load_settings()
    backend = InProcessBackend.from_pretrained(
        settings.model, cache_dir=settings.cache_dir, device=settings.device, max_batch_size=max(args.sizes)
    )
    tasks = load_tasks("arithmetic", n=max(args.sizes), seed=0, split="heldout")
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_store(f"sqlite:///{Path(tmp) / 'bench.db'}")
        print(f"model {settings.model} · greedy · max_new_tokens {args.max_new_tokens} · torch threads "
              f"{__import__('torch').get_num_threads()}")
        print(f"{'concurrency':>11} {'raw tok/s':>10} {'play tok/s':>11} {'play/raw':>9}")
        for size in args.sizes:
            raw = raw_tokens_per_s(backend, tasks, size, args.max_new_tokens)
            episodes = tasks[: max(size, SEQUENTIAL_PROMPTS)]
            with Recorder(engine) as recorder:
                rate, _ = play_once(backend, episodes, size, args.max_new_tokens, recorder)
            print(f"{size:>11} {raw:>10.1f} {rate:>11.1f} {rate / raw:>9.2f}")

        size = 16 if 16 in args.sizes else args.sizes[-1]
        walls: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(args.repeats):
            with Recorder(engine) as recorder:
                walls["on"].append(play_once(backend, tasks[:size], size, args.max_new_tokens, recorder)[1])
            walls["off"].append(play_once(backend, tasks[:size], size, args.max_new_tokens, NullRecorder())[1])
        on, off = statistics.median(walls["on"]), statistics.median(walls["off"])
        print(f"logging at concurrency {size}: recorder on {on:.2f} s, off {off:.2f} s, "
              f"overhead {100 * (on / off - 1):+.1f}% (median of {args.repeats})")
    asyncio.run(backend.aclose())


if __name__ == "__main__":
    main()
