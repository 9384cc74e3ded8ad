"""A batch-invariant model (``graphs.policies.batch_invariant``): a row's answer and logprobs are
the same bit for bit alone and beside rows of other lengths and other adapters, on tiny random
models in bfloat16; and which precision evaluations that decide play in."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch
from tiny_model import save_random_lora, tiny_model, tiny_tokenizer
from transformers.models.llama.modeling_llama import eager_attention_forward

from graphs.policies import deciding
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.batch_invariant import ROWS, fix_rows, grouped_attention
from graphs.policies.cpu_precision import native_bf16_cpu
from graphs.policies.inprocess import InProcessBackend

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)
SAMPLED = SamplingParams(temperature=0.8, max_new_tokens=10, seed=7)
TARGET = [{"role": "user", "content": "Mia has 3 boxes of 12 pencils. How many pencils?"}]

needs_native_bf16 = pytest.mark.skipif(
    not native_bf16_cpu(),
    reason="this CPU has no bfloat16 instructions (AVX512-BF16 or AMX): its bfloat16 kernels are emulated, and "
    "the backend plays and decides in float32 here; batch invariance is checked where it is used",
)


def _others(count: int) -> list[list[dict[str, str]]]:
    """Prompts of many lengths (so the target row gets many paddings)."""
    return [[{"role": "user", "content": "word " * (1 + 7 * i % 45) + f"question {i}?"}] for i in range(count)]


@needs_native_bf16
def test_a_rows_answer_does_not_depend_on_what_shares_its_batch(tmp_path):
    tokenizer = tiny_tokenizer()
    folders = {name: save_random_lora(tiny_model(tokenizer), tmp_path / name, seed)
               for name, seed in (("actor@v1", 1), ("critic@v1", 2))}

    async def scenario():
        backend = InProcessBackend(tiny_model(tokenizer).to(torch.bfloat16), tokenizer, model_name="tiny",
                                   max_batch_size=96, batch_wait_s=0.05, batch_invariant=True)
        for name, folder in folders.items():
            await backend.load_adapter(name, str(folder))
        adapters = [None, *folders]

        async def target_beside(others: list, sampling: SamplingParams, adapter: str | None, mixed: bool):
            requests = [GenerationRequest(TARGET, sampling, adapter=adapter)] + [
                GenerationRequest(messages, GREEDY, adapter=adapters[i % 3] if mixed else adapter)
                for i, messages in enumerate(others)
            ]
            results = await asyncio.gather(*(backend.generate(r) for r in requests))
            return results[0]

        try:
            for adapter in adapters:
                for sampling in (GREEDY, SAMPLED):
                    alone = await target_beside([], sampling, adapter, mixed=False)
                    beside = [
                        await target_beside(_others(5), sampling, adapter, mixed=False),  # one adapter
                        await target_beside(_others(6), sampling, adapter, mixed=True),  # PEFT's mixed batch
                        await target_beside(_others(ROWS + 9), sampling, adapter, mixed=True),  # two row blocks
                    ]
                    for other in beside:
                        assert other.completion_token_ids == alone.completion_token_ids
                        assert other.logprobs == alone.logprobs  # bit for bit, not approximately
        finally:
            await backend.aclose()
        assert backend.kernels == "batch-invariant" and backend.precision == "bfloat16"

    asyncio.run(scenario())


def _padded(pad: int, q, k, v, *, decode: bool):
    """q, k and v after ``pad`` positions of random padding, with transformers' additive mask
    (causal, padding masked); the query of the last position only when ``decode``."""
    noise = torch.Generator().manual_seed(pad)
    extra = [torch.randn(*t.shape[:2], pad, t.shape[3], generator=noise).to(t.dtype) for t in (q, k, v)]
    qq, kk, vv = (torch.cat([e, t], dim=2) for e, t in zip(extra, (q, k, v), strict=True))
    width = kk.shape[2]
    allowed = torch.tril(torch.ones(width, width, dtype=torch.bool))
    allowed[:, :pad] = False
    mask = torch.zeros(1, 1, width, width, dtype=q.dtype).masked_fill(~allowed, torch.finfo(q.dtype).min)
    if decode:
        return qq[:, :, -1:], kk, vv, mask[:, :, -1:]
    return qq, kk, vv, mask


@pytest.mark.parametrize("decode", [False, True])
def test_attention_gives_a_row_the_same_bits_whatever_its_padding(decode):
    """bfloat16, as the backend plays it (in float32 the scores' products are not covered)."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, 70, 64, generator=generator).to(torch.bfloat16) for heads in (9, 3, 3))
    alone, _ = grouped_attention(None, *_padded(0, q, k, v, decode=decode), scaling=0.125)
    for pad in (1, 2, 3, 5, 13, 31, 64, 97):
        padded, _ = grouped_attention(None, *_padded(pad, q, k, v, decode=decode), scaling=0.125)
        real = padded[:, -alone.shape[1]:]  # the padding's own queries are not the row's
        assert torch.equal(real, alone), pad
    inputs = _padded(13, q, k, v, decode=decode)
    expected, _ = eager_attention_forward(SimpleNamespace(num_key_value_groups=3, training=False), *inputs,
                                          scaling=0.125)
    got, _ = grouped_attention(None, *inputs, scaling=0.125)
    assert got.shape == expected.shape
    # the function transformers' eager attention computes, on the row's own queries
    torch.testing.assert_close(got[:, -alone.shape[1]:], expected[:, -alone.shape[1]:])


def test_fixed_row_products_keep_the_layers_function():
    torch.manual_seed(0)
    layer = torch.nn.Linear(48, 24)
    model = torch.nn.Sequential(layer, torch.nn.ReLU(), torch.nn.Linear(24, 8, bias=False))
    x = torch.randn(3, ROWS + 5, 48)
    before = model(x)
    assert fix_rows(model) == 2 and fix_rows(model) == 0  # a second call changes nothing
    after = model(x)
    assert after.shape == before.shape
    torch.testing.assert_close(after, before)  # the same function, up to round-off
    assert torch.equal(model(x[:1, :1]), after[:1, :1])  # a row alone: bit for bit


@pytest.mark.parametrize(("dtype", "eval_dtype", "device", "pays", "expected"), [
    ("auto", "auto", "cpu", True, "bfloat16"),  # batch-invariant bfloat16: evaluations play where games do
    ("bfloat16", "auto", "auto", True, "bfloat16"),
    ("auto", "auto", "cpu", False, "float32"),  # bfloat16 emulated, or native and not faster: float32
    ("float32", "auto", "cpu", True, "float32"),  # the user plays in float32
    ("auto", "float32", "cpu", True, "float32"),
    ("bfloat16", "same", "cpu", False, "bfloat16"),
    ("auto", "auto", "cuda", True, "float32"),  # a GPU's bfloat16 kernels are not made invariant
])
def test_the_deciding_precision(monkeypatch, dtype, eval_dtype, device, pays, expected):
    monkeypatch.setattr(deciding, "bfloat16_pays", lambda cache_dir=None: pays)
    monkeypatch.setattr(deciding, "resolve_device",
                        lambda name: torch.device("cpu" if name in ("cpu", "auto") else name))
    assert deciding.deciding_dtype(dtype, eval_dtype, device) == expected
