"""Run every benchmark in bench/, one after another, each printing its own tables of ratios.

A benchmark is any script of bench/ with a ``__main__`` block (the shared modules have none),
so one added later runs too. The store benchmarks (store_ingest, query_paging,
dataset_build) take ``--turns`` and ``--postgres-url``; ``--quick`` runs everything at small
sizes (a smoke run: its figures are not the ones to report). A failing benchmark does not
stop the others; the exit status says whether any failed. Each runs as ``python -m bench.NAME``
in the repository root, whichever folder this is started from.

    python -m bench.run_all                            # full sizes (the store ones: 1M turns)
    python -m bench.run_all --quick
    python -m bench.run_all --only query_paging dataset_build --turns 200000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import make_url

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
POSTGRES_ENV = "SPARRING_BENCH_POSTGRES_URL"
ORDER = (
    "play_throughput",
    "backend_throughput",
    "batch_invariance",
    "adapter_batches",
    "vllm_vs_inprocess",
    "store_ingest",
    "query_paging",
    "dataset_build",
    "sft_throughput",
    "grpo_step",
    "kv_cache",
    "learning_recipes",
)
"""Known benchmarks run in this order; others after them, by name."""
TOOLS = ("random_model",)
"""Scripts here that prepare a benchmark's inputs and measure nothing: never run."""
STORE_BENCHMARKS = ("store_ingest", "query_paging", "dataset_build")
POSTGRES_BENCHMARKS = (*STORE_BENCHMARKS, "ray_throughput")
"""Those given --postgres-url (ray_throughput needs PostgreSQL: Ray refuses SQLite)."""
QUICK_TURNS = 20_000
QUICK_ARGS = {
    "play_throughput": ["--sizes", "1", "16", "--max-new-tokens", "32", "--repeats", "1"],
    "backend_throughput": ["--sizes", "1", "16", "--max-new-tokens", "32", "--repeats", "1"],
    "batch_invariance": ["--prompts", "8", "--alone", "2"],
    "adapter_batches": ["--prompts", "8", "--repeats", "1"],
    "vllm_vs_inprocess": ["--prompts", "16", "--max-new-tokens", "32", "--repeats", "1"],
    "store_ingest": ["--repeats", "1"],
    "query_paging": ["--repeats", "3"],
    "dataset_build": ["--repeats", "1"],
    "sft_throughput": ["--steps", "2"],
    "grpo_step": ["--steps", "1"],
    "kv_cache": ["--batches", "16", "--lengths", "64", "--steps", "4"],
    "learning_recipes": ["--recipes", "sft,dpo", "--budget", "60", "--train-tasks", "16", "--eval-tasks", "32"],
    "ray_throughput": ["--episodes", "200", "--workers", "1", "2"],
}


def benchmarks() -> list[str]:
    found = {p.stem for p in HERE.glob("*.py")
             if p.name != Path(__file__).name and not p.stem.startswith("_") and p.stem not in TOOLS
             and "__main__" in p.read_text()}
    return [name for name in ORDER if name in found] + sorted(found - set(ORDER))


def command(name: str, args: argparse.Namespace) -> list[str]:
    argv = [sys.executable, "-m", f"bench.{name}"]
    if args.quick:
        argv += QUICK_ARGS.get(name, [])
    if name in STORE_BENCHMARKS:
        turns = args.turns or (QUICK_TURNS if args.quick else None)
        argv += ["--turns", str(turns)] if turns else []
    if name in POSTGRES_BENCHMARKS:
        argv += ["--postgres-url", args.postgres_url or ""]
    return argv


def _shown(argv: list[str]) -> list[str]:
    """The arguments with any database password hidden."""
    return [make_url(a).render_as_string(hide_password=True) if "://" in a else a for a in argv]


def main() -> int:
    names = benchmarks()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"small sizes ({QUICK_TURNS:,} turns for the store ones)")
    parser.add_argument("--turns", type=int, help="turns for the store benchmarks (default: each one's own)")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(POSTGRES_ENV),
        help=f"PostgreSQL server for the store benchmarks and ray_throughput (default: ${POSTGRES_ENV}; none: SQLite "
        "only)",
    )
    parser.add_argument("--only", nargs="+", choices=names, metavar="NAME", help=f"run only these: {', '.join(names)}")
    parser.add_argument("--skip", nargs="+", choices=names, default=[], metavar="NAME", help="run all but these")
    args = parser.parse_args()

    failed = []
    for name in args.only or names:
        if name in args.skip:
            continue
        argv = command(name, args)
        print(f"\n=== {name}  ({' '.join(_shown(argv[1:]))})", flush=True)
        started = time.perf_counter()
        if subprocess.run(argv, cwd=ROOT, check=False).returncode != 0:
            failed.append(name)
        print(f"=== {name}: {time.perf_counter() - started:.0f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
