"""Seconds per SFT step of the bundled model, the default LoRA settings against variants, in one run.

The rows are shaped like the main job's actor rows (``sparring retrain``): three first answers
to one refinement (a first answer, a critique, the answer again), written from level-1
arithmetic training problems (the level the main job practises). Every setting trains a fresh
adapter from the base model on the same rows, in the same order, for ``--steps`` optimiser
steps of ``--batch-size`` rows (TRL's SFTTrainer through ``train_sft``, as ``sparring train
sft`` does). The first setting is the baseline; the table gives each setting's seconds per
step, trained tokens per second, the ratio of its time to the baseline's, and the share of the
CPU's matmul peak in the setting's precision (measured here) its tokens would take at 4 x
params FLOPs a token (forward 2, backward through the frozen weights 2; an upper bound, since
the output head runs on completion tokens only and the adapters' own FLOPs, under 1%, are left
out). Training runs on the CPU, in float32 (``bfloat16``: the frozen base model in bfloat16,
the adapter and optimiser in float32), as on a laptop.

    python -m bench.sft_throughput                       # default vs lora dropout 0.05, 24 steps each
    python -m bench.sft_throughput --steps 8 --settings default bfloat16 checkpointing
"""

from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from dataclasses import replace
from itertools import islice
from pathlib import Path

from app.quiet import QUIET_ENVIRONMENT

# set before torch, transformers and TRL are imported, which read them: their progress bars stay out of the table
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.update({name: value for name, value in QUIET_ENVIRONMENT.items() if name not in os.environ})

import torch

from app import api
from bench.common import note, print_table
from bench.play_throughput import matmul_peak_flops, note_emulated_bfloat16
from graphs.math_reflection.prompts import actor_messages, refine_messages
from graphs.policies.base_models import load_model
from graphs.tasks.arithmetic import problems
from training.trainers.kinds import train_sft
from training.trainers.sft_config import SFTTrainingConfig

warnings.filterwarnings("ignore", category=FutureWarning)  # TRL's use of transformers' renamed APIs

SETTINGS = {
    "default": lambda c: c,
    "dropout": lambda c: replace(c, lora=replace(c.lora, dropout=0.05)),
    "checkpointing": lambda c: replace(c, gradient_checkpointing=True),
    "bfloat16": lambda c: replace(c, precision="bfloat16"),
}
"""Each setting named on the command line: how it changes the default SFT settings."""


def rows(count: int) -> list[dict]:
    """Prompt-completion rows like the main job's: every fourth a refinement after a critique."""
    made = []
    for i, task in enumerate(islice(problems("train", 1), count)):
        expression = task.meta["expression"]
        answer = f"We compute {expression} step by step.\n{expression} = {task.answer}\nAnswer: {task.answer}"
        prompt = actor_messages(task.question)
        if i % 4 == 3:
            critique = "The steps look right, but check the last operation again.\nVerdict: incorrect"
            prompt = refine_messages(task.question, answer, critique)
        made.append({"prompt": prompt, "completion": [{"role": "assistant", "content": answer}]})
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=24, help="optimiser steps per setting (default 24)")
    parser.add_argument("--batch-size", type=int, default=4, help="rows per step (the SFT default, 4)")
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["default", "dropout"],
                        help="settings to time, the first is the baseline (default: default dropout)")
    args = parser.parse_args()
    settings = api.settings()
    data = rows(args.steps * args.batch_size)
    base = SFTTrainingConfig(model=settings.model, device="cpu", seed=settings.seed, max_steps=args.steps,
                             per_device_train_batch_size=args.batch_size)
    model, _ = load_model(settings.model, cache_dir=settings.cache_dir, device="cpu")
    params = sum(p.numel() for p in model.parameters())
    del model
    precisions = ["float32", *(["bfloat16"] if "bfloat16" in args.settings else [])]
    if "bfloat16" in precisions:
        note_emulated_bfloat16()
    peaks = {dtype: matmul_peak_flops(getattr(torch, dtype), torch.device("cpu")) for dtype in precisions}
    note(f"{len(data)} rows, {args.steps} steps of {args.batch_size}; {params / 1e6:.1f} M params, matmul peak "
         + ", ".join(f"{peaks[dtype] / 1e9:.1f} GFLOP/s in {dtype}" for dtype in precisions))
    table, baseline = [], None
    with tempfile.TemporaryDirectory(prefix="sparring-bench-sft-") as workdir:
        for name in args.settings:
            note(f"training: {name}")
            config = SETTINGS[name](base)
            result = train_sft(data, config, role="actor", output_dir=Path(workdir) / name,
                               cache_dir=settings.cache_dir)
            seconds, tokens = result.metrics["runtime_s"], result.metrics["num_tokens"]
            baseline = baseline or seconds
            peak = peaks["bfloat16" if config.precision == "bfloat16" else "float32"]
            utilisation = tokens * 4 * params / seconds / peak
            table.append([name, seconds / args.steps, tokens / seconds, seconds / baseline, f"{utilisation:.0%}"])
    print(f"SFT on the bundled model, {args.steps} steps of {args.batch_size} rows, time against {args.settings[0]}:")
    print_table(["setting", "s/step", "tokens/s", "time ratio", "of peak"], table)


if __name__ == "__main__":
    main()
