"""The decode loop's growing KV cache against transformers' DynamicCache, on a tiny random Llama."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaForCausalLM
from transformers.cache_utils import DynamicSlidingWindowLayer

from graphs.policies.kv_cache import HEADROOM, GrowingCache, GrowingLayer
from tiny_model import tiny_config, tiny_tokenizer


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config(tiny_tokenizer())).eval()


def _decode(model, cache, prompt: torch.Tensor, steps: int) -> tuple[list[torch.Tensor], list[int]]:
    """Greedy steps after a prefill: the logits of every step, and the address of the first
    layer's keys after it."""
    logits, addresses = [], []
    with torch.inference_mode():
        out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
        for _ in range(steps):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(input_ids=token, past_key_values=cache, use_cache=True)
            logits.append(out.logits[:, -1])
            addresses.append(cache.layers[0].keys.data_ptr())
    return logits, addresses


def test_decoding_with_the_growing_cache_gives_dynamic_caches_logits_and_copies_it_once_per_headroom(model) -> None:
    prompt = torch.randint(0, model.config.vocab_size, (3, 7), generator=torch.Generator().manual_seed(1))
    steps = 2 * HEADROOM + 10
    expected, _ = _decode(model, DynamicCache(config=model.config), prompt, steps)
    cache = GrowingCache(model.config)
    assert all(type(layer) is GrowingLayer for layer in cache.layers)
    got, addresses = _decode(model, cache, prompt, steps)
    for step, (a, b) in enumerate(zip(expected, got, strict=True)):
        torch.testing.assert_close(b, a, msg=f"step {step}")
    # the buffers were reallocated only when their spare positions ran out: the prefill's
    # buffers took HEADROOM steps, each later one HEADROOM more
    assert len(set(addresses)) == -(-(steps + 1) // HEADROOM)
    layer = cache.layers[0]
    assert layer.get_seq_length() == 7 + steps and layer.capacity >= layer.get_seq_length()


def test_keys_replaced_from_outside_are_taken_over_at_the_next_update(model) -> None:
    """What a batch's keep does: drop rows and left columns by assigning keys and values."""
    prompt = torch.randint(0, model.config.vocab_size, (3, 9), generator=torch.Generator().manual_seed(2))

    def decode(cache) -> list[torch.Tensor]:
        logits = []
        with torch.inference_mode():
            out = model(input_ids=prompt, past_key_values=cache, use_cache=True)
            for step in range(8):
                token = out.logits[:, -1].argmax(-1, keepdim=True)
                if step == 3:  # rows 0 and 2 stay, the first column goes
                    token = token[[0, 2]]
                    for layer in cache.layers:
                        layer.keys, layer.values = layer.keys[[0, 2], :, 1:], layer.values[[0, 2], :, 1:]
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                logits.append(out.logits[:, -1])
        return logits

    expected, got = decode(DynamicCache(config=model.config)), decode(GrowingCache(model.config))
    assert [t.shape[0] for t in got] == [3, 3, 3, 2, 2, 2, 2, 2]
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(b, a)


def test_sliding_window_layers_are_left_as_transformers_makes_them() -> None:
    config = tiny_config(tiny_tokenizer())
    config.layer_types = ["sliding_attention", "full_attention"]
    config.sliding_window = 16
    cache = GrowingCache(config)
    assert type(cache.layers[0]) is DynamicSlidingWindowLayer
    assert type(cache.layers[1]) is GrowingLayer
