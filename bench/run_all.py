"""Run every benchmark in bench/, one after another, each printing its own ratios.

    python bench/run_all.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = ["play_throughput.py", "backend_throughput.py"]


def main() -> int:
    here = Path(__file__).resolve().parent
    failed = []
    for name in BENCHMARKS:
        print(f"\n=== {name}", flush=True)
        if subprocess.run([sys.executable, str(here / name)], check=False).returncode != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
