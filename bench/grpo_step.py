"""Seconds per online GRPO step of the bundled model, with the base model in float32 against
bfloat16, in one run.

Each setting trains a fresh actor adapter from the base model by GRPO (``sparring train grpo``
through ``app.api.train``, its default settings otherwise) for ``--steps`` optimiser steps on
the same level-1 arithmetic training tasks, its rollouts played through math-reflection with a
scripted critic that accepts every answer, into a store of its own. The precision is the
trainer's ``precision``: the frozen base model's weights, which both generate the rollouts and
take the gradient (the LoRA weights and the optimiser stay float32). The table gives each
setting's seconds per step, steps per minute, its time against the first setting's, the mean
reward of its rollouts, and the share of the CPU's matmul peak in the setting's precision its
tokens would take at 6 x params FLOPs a token (2 to generate the rollout, 2 forward and 2
backward through the frozen weights to train on it: an upper bound, since generation re-reads
no prompt token and the adapters' own FLOPs are left out).

    python -m bench.grpo_step                     # float32 vs bfloat16, 3 steps each (float32
                                                  # alone where the CPU would emulate bfloat16)
    python -m bench.grpo_step --steps 5 --settings bfloat16 float32
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from pathlib import Path

from app.quiet import QUIET_ENVIRONMENT

# set before torch, transformers and TRL are imported, which read them: their progress bars stay out of the table
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.update({name: value for name, value in QUIET_ENVIRONMENT.items() if name not in os.environ})

import torch

from app import api
from bench.common import note, print_table
from bench.play_throughput import matmul_peak_flops, precisions_to_time
from graphs.policies.base_models import load_model

warnings.filterwarnings("ignore", category=FutureWarning)  # TRL's use of transformers' renamed APIs

PRECISIONS = ("float32", "bfloat16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="optimiser steps per setting (default 3)")
    parser.add_argument("--settings", nargs="+", choices=PRECISIONS, default=None,
                        help="precisions to time, the first is the baseline (default: float32 bfloat16, "
                             "float32 alone on a CPU without bfloat16 instructions)")
    args = parser.parse_args()
    names = precisions_to_time(args.settings, PRECISIONS)
    settings = api.settings()
    model, _ = load_model(settings.model, cache_dir=settings.cache_dir, device="cpu")
    params = sum(p.numel() for p in model.parameters())
    del model
    peaks = {name: matmul_peak_flops(getattr(torch, name), torch.device("cpu")) for name in names}
    note(f"{args.steps} GRPO steps per setting; {params / 1e6:.1f} M params, matmul peak "
         + ", ".join(f"{peaks[name] / 1e9:.1f} GFLOP/s in {name}" for name in names))
    table, baseline = [], None
    with tempfile.TemporaryDirectory(prefix="sparring-bench-grpo-") as workdir:
        for name in names:
            note(f"training: {name}")
            folder = Path(workdir) / name
            folder.mkdir()
            config = folder / "grpo.yaml"
            config.write_text(f"precision: {name}\n")
            os.environ["SPARRING_DATA_DIR"] = str(folder / "data")  # each setting publishes into its own store
            result = api.train("grpo", role="actor", fresh=True, max_steps=args.steps, tasks="arithmetic:1",
                               seats=["critic=scripted:always-correct"], config_file=config,
                               database_url=f"sqlite:///{folder / 'store.db'}")
            assert result is not None  # one process: it records the job
            seconds, steps = result.metrics["runtime_s"], result.metrics["steps"]
            baseline = baseline or seconds / steps
            tokens = result.metrics.get("num_tokens")
            share = f"{tokens * 6 * params / seconds / peaks[name]:.0%}" if tokens else "n/a"
            table.append([name, seconds / steps, 60 * steps / seconds, seconds / steps / baseline,
                          result.metrics.get("reward", float("nan")), share])
    print(f"Online GRPO on the bundled model, {args.steps} steps each, time against {names[0]}:")
    print_table(["precision", "s/step", "steps/min", "time ratio", "reward", "of peak"], table)


if __name__ == "__main__":
    main()
