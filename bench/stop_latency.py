"""How long `sparring play` takes to stop on Ctrl-C (SIGINT) and on SIGTERM once it generates.

Each case starts `sparring play math-reflection` in a child process on a fresh SQLite file,
waits until its first episode is logged (generation is under way: the model's batch is
prefilled and decoding) and then --after seconds more, sends the signal and times how long
the process takes to exit. It must exit 130 (SIGINT) or 143 (SIGTERM) with its run marked
``interrupted`` and no episode left ``running``. Two figures: the time to the command's
"interrupted" line (its work has stopped and what was running is marked) and the time to the
process's exit (which adds the interpreter's shutdown). The in-process backend looks for cancelled
requests between decode steps, so the stop should take about one decode step of the running
batch plus the command's cleanup, not the rest of the batch.

Policies: ``bundled`` (both seats on the configured model, SmolLM2-135M by default: the case
that took minutes before) and ``scripted`` (bots, no model: the floor set by the cleanup).
This is a measurement, not a test: the figures depend on the machine and its load.

    python -m bench.stop_latency
    python -m bench.stop_latency --policies scripted --signals INT
    python -m bench.stop_latency --concurrency 64 --after 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import note, print_table
from storage.bench_rows import episode_count, first_run_status, interrupted_count
from storage.engine import open_store

SIGNALS = {"INT": (signal.SIGINT, 130), "TERM": (signal.SIGTERM, 143)}
SEATS = {
    "bundled": [],
    "scripted": ["--seat", "actor=scripted:calculator", "--seat", "critic=scripted:always-correct"],
}
START_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Stop:
    policies: str
    signal: str
    started_s: float
    """from the command's start to its first logged episode"""
    said_s: float | None
    """from the signal to the command's "interrupted" line: its work stopped and marked"""
    stop_s: float
    """from the signal to the process's exit"""
    exit_code: int
    run_status: str | None
    running_left: int
    marked_failed: int


def _terminal_sigint() -> None:
    """Ctrl-C as a terminal delivers it (a child of a shell without job control inherits SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def measure(policies: str, signame: str, args: argparse.Namespace) -> Stop:
    folder = Path(tempfile.mkdtemp(prefix="sparring-stop-"))
    url = f"sqlite:///{folder / 'store.db'}"
    environ = {**os.environ, "SPARRING_DATABASE_URL": url, "SPARRING_DATA_DIR": str(folder / "data")}
    command = [sys.executable, "-m", "app.cli", "play", "math-reflection", "-n", str(args.episodes),
               "-c", str(args.concurrency), "--max-new-tokens", str(args.max_new_tokens), *SEATS[policies]]
    engine = open_store(url)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=environ,
                               cwd=Path(__file__).resolve().parents[1], preexec_fn=_terminal_sigint)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.perf_counter(), line) for line in process.stderr))
    reader.start()
    try:
        while not episode_count(engine):
            if process.poll() is not None:
                reader.join()
                raise RuntimeError(f"play ended before its first episode: {''.join(line for _, line in lines)}")
            if time.perf_counter() - started > START_TIMEOUT_S:
                raise RuntimeError(f"no episode logged within {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)
        generating = time.perf_counter()
        time.sleep(args.after)
        sent = time.perf_counter()
        process.send_signal(SIGNALS[signame][0])
        code = process.wait(timeout=STOP_TIMEOUT_S)
        stopped = time.perf_counter()
        reader.join()
        said = next((at - sent for at, line in lines if line.startswith("interrupted")), None)
        return Stop(policies, signame, generating - started, said, stopped - sent, code, first_run_status(engine),
                    episode_count(engine, "running"), interrupted_count(engine))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        engine.dispose()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policies", nargs="+", choices=list(SEATS), default=list(SEATS))
    parser.add_argument("--signals", nargs="+", choices=list(SIGNALS), default=list(SIGNALS))
    parser.add_argument("--episodes", type=int, default=2000, help="episodes asked for (far more than get played)")
    parser.add_argument("--concurrency", type=int, default=32, help="episodes played at once (the batch)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--after", type=float, default=3.0, help="seconds of generation before the signal")
    args = parser.parse_args()

    stops = []
    for policies in args.policies:
        for signame in args.signals:
            note(f"{policies}, SIG{signame}: starting play -c {args.concurrency}…")
            stops.append(measure(policies, signame, args))
    print(f"play math-reflection -c {args.concurrency} --max-new-tokens {args.max_new_tokens}, signal sent "
          f"{args.after:g} s after the first episode was logged; start: to that episode; stopped: signal to the "
          "command's 'interrupted' line (work stopped, episodes marked); exit: signal to the process's end")
    print_table(
        ["policies", "signal", "start s", "stopped s", "exit s", "code", "expected", "run", "marked", "running"],
        [(s.policies, f"SIG{s.signal}", s.started_s, "-" if s.said_s is None else s.said_s, s.stop_s, s.exit_code,
          SIGNALS[s.signal][1], s.run_status, s.marked_failed, s.running_left) for s in stops],
    )
    wrong = [s for s in stops if s.exit_code != SIGNALS[s.signal][1] or s.running_left or s.run_status != "interrupted"]
    for s in wrong:
        print(f"not a clean stop: {s}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
