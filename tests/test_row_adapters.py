"""Row-by-row LoRA (``graphs.policies.row_adapters``): the adapted layers compute, bit for bit,
what PEFT's own forward computes for each set-up (one adapter, the base model, mixed rows), and
LoRA variants it cannot run are refused when loaded."""

from __future__ import annotations

import asyncio

import pytest
import torch
from peft import LoraConfig, PeftModelForCausalLM, get_peft_model
from tiny_model import save_random_lora, tiny_model, tiny_tokenizer

from graphs.policies.base import BackendError
from graphs.policies.batch_invariant import fix_rows
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.row_adapters import RowAdapters


def _inputs(tokenizer) -> dict[str, torch.Tensor]:
    """Three rows of different lengths, left-padded."""
    tokenizer.padding_side = "left"
    texts = ["three boxes of twelve pencils", "seven", "a much longer question about nine apples and two pears"]
    return dict(tokenizer(texts, return_tensors="pt", padding=True))


@torch.inference_mode()
def test_rows_get_the_numbers_pefts_forward_gives_them(tmp_path):
    tokenizer = tiny_tokenizer()
    folders = {name: save_random_lora(tiny_model(tokenizer), tmp_path / name, seed)
               for name, seed in (("a", 1), ("b", 2))}
    peft = PeftModelForCausalLM.from_pretrained(tiny_model(tokenizer), str(folders["a"]), adapter_name="a")
    peft.load_adapter(str(folders["b"]), adapter_name="b")
    peft.eval()
    fix_rows(peft)  # each row's products alike however many rows share them, as on a batch-invariant model
    inputs = _inputs(tokenizer)
    rows = ["a", None, "b"]

    singles = {}
    for name in ("a", "b"):
        peft.set_adapter(name)
        singles[name] = peft(**inputs).logits
    with peft.disable_adapter():
        singles[None] = peft(**inputs).logits
    pefts_mixed = peft(**inputs, adapter_names=[r or "__base__" for r in rows]).logits

    row_adapters = RowAdapters(torch.float32)
    row_adapters.install(peft)
    for adapter, logits in singles.items():
        row_adapters.use([adapter])
        assert torch.equal(peft(**inputs).logits, logits), adapter
    row_adapters.use(rows)
    mixed = peft(**inputs).logits
    assert torch.equal(mixed, pefts_mixed)
    for i, adapter in enumerate(rows):  # each row as a batch of its own adapter computes it
        assert torch.equal(mixed[i], singles[adapter][i]), adapter
    assert not torch.allclose(singles["a"], singles[None])  # the adapters change the model: the checks see them
    assert not torch.allclose(singles["a"], singles["b"])


def test_a_lora_variant_is_refused_with_how_to_serve_it(tmp_path):
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    dora = get_peft_model(tiny_model(tokenizer), LoraConfig(r=4, target_modules=["q_proj"], use_dora=True))
    dora.save_pretrained(tmp_path / "dora")

    async def scenario():
        backend = InProcessBackend(tiny_model(tokenizer), tokenizer, model_name="tiny", batch_invariant=True)
        try:
            with pytest.raises(BackendError, match=r"use_dora.*SPARRING_EVAL_DTYPE=float32"):
                await backend.load_adapter("actor@v1", str(tmp_path / "dora"))
            assert backend.adapters() == []  # nothing half-loaded
            await backend.load_adapter("actor@v2", str(save_random_lora(tiny_model(tokenizer), tmp_path / "p", 1)))
            assert backend.adapters() == ["actor@v2"]
        finally:
            await backend.aclose()

    asyncio.run(scenario())
