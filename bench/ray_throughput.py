"""Episodes/s of `sparring play --ray` with 1, 2 and 4 Ray workers against `--workers` on the same
machine, in one run, as ratios against the `--workers` baseline of the same size.

Each figure is one `sparring play math-reflection` command (a child process, as a user starts
it) with scripted seats, so what is measured is the machinery, not a model: the workers'
start-up (a Ray actor, or a process forked from the fork server), handing out the shares,
the store writes from every worker and, for Ray, the driver's polling of the store. Both write
to a fresh PostgreSQL database each (Ray refuses SQLite). Two rates are printed: the command's
(its wall time, start-up included) and the play's own (the summary's ``wall_s``). The Ray
cluster is a local head started here with 2 CPUs (workers ask for 2/N of them each), or the
one at ``--ray``.

    python -m bench.ray_throughput                          # 2000 episodes, 1 2 4 workers
    python -m bench.ray_throughput --episodes 200 --workers 1 2
    python -m bench.ray_throughput --ray 10.0.0.5:6379      # a cluster of yours (its store must be reachable)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from bench.common import (
    add_postgres_argument,
    fresh_postgres_database,
    note,
    postgres_server,
    print_table,
)

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))
SEATS = ["--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct"]
LOCAL_CPUS = 2


@contextmanager
def local_cluster() -> Iterator[str]:
    """A one-node Ray cluster on loopback (no dashboard, a 100 MB object store), stopped afterwards."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    head = subprocess.Popen([RAY, "start", "--head", "--port", str(port), "--num-cpus", str(LOCAL_CPUS),
                             "--object-store-memory", str(100 * 2**20), "--include-dashboard=false",
                             "--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--block"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "RAY_agent_register_timeout_ms": "120000"})  # slow agents on a busy box
    try:
        deadline = time.monotonic() + 300
        while subprocess.run([RAY, "status", "--address", address], capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local Ray head at {address} did not start in 300 s")
            time.sleep(0.5)
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait()


def play(url: str, episodes: int, concurrency: int, workers: int, ray: str | None, cpus: float) -> tuple[float, float]:
    """(the command's episodes/s, start-up included; the play's own episodes/s)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SPARRING_")}
    environ.update(SPARRING_DATABASE_URL=url, SPARRING_RAY_WORKER_CPUS=str(cpus))
    argv = [sys.executable, "-m", "app.cli", "play", "math-reflection", *SEATS, "-n", str(episodes),
            "-c", str(concurrency), "--workers", str(workers), "-f", "json", *(["--ray", ray] if ray else [])]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=environ, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[3:])} failed:\n{done.stderr}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])[0]
    if summary["succeeded"] != episodes:
        raise RuntimeError(f"{summary['succeeded']} of {episodes} episodes succeeded")
    return episodes / wall, episodes / summary["wall_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=2000, help="episodes of each command (default 2000)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="worker counts (default 1 2 4)")
    parser.add_argument("--concurrency", type=int, default=8, help="episodes each worker plays at once (default 8)")
    parser.add_argument("--ray", help="a running cluster's address (default: a local head started here)")
    add_postgres_argument(parser)
    args = parser.parse_args()
    server = postgres_server(args.postgres_url)
    if server is None:
        return 0
    try:
        import ray  # noqa: F401
    except ImportError:
        print("Ray: skipped (not installed: pip install 'sparring[ray]')")
        return 0
    rows = []
    with local_cluster() if args.ray is None else nullcontext(args.ray) as address:
        for workers in args.workers:
            figures = {}
            for how, ray in (("--workers", None), ("--ray", address)):
                note(f"{how} {workers}: {args.episodes} episodes")
                with fresh_postgres_database(server) as url:
                    figures[how] = play(url, args.episodes, args.concurrency, workers, ray, LOCAL_CPUS / workers)
            (base, base_play), (on_ray, ray_play) = figures["--workers"], figures["--ray"]
            rows.append([workers, base, on_ray, on_ray / base, base_play, ray_play, ray_play / base_play])
    print(f"\nsparring play math-reflection, scripted seats, {args.episodes} episodes, -c {args.concurrency}, "
          f"{os.cpu_count()} cores; ray at {'a local head' if args.ray is None else args.ray}")
    print_table(["workers", "--workers ep/s", "--ray ep/s", "ray/workers", "play only: --workers", "--ray",
                 "ray/workers"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
