"""Merging a LoRA adapter into bfloat16 weights (graphs.policies.lora_merge): stochastic
rounding keeps a small update on average, where rounding to nearest drops it."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from tiny_model import tiny_model, tiny_tokenizer

from graphs.policies.lora_merge import AdapterMerger, to_bfloat16_stochastically


def test_stochastic_rounding_picks_a_neighbour_with_the_right_odds() -> None:
    low, high = torch.tensor(1.0, dtype=torch.bfloat16), torch.nextafter(
        torch.tensor(1.0, dtype=torch.bfloat16), torch.tensor(2.0, dtype=torch.bfloat16))
    step = (high.float() - low.float()).item()
    values = torch.full((20_000,), 1.0 + 0.25 * step)  # a quarter of the way up
    rounded = to_bfloat16_stochastically(values, torch.Generator().manual_seed(0))
    assert set(rounded.float().unique().tolist()) == {low.item(), high.item()}
    assert (rounded == high).float().mean().item() == pytest.approx(0.25, abs=0.02)
    negative = to_bfloat16_stochastically(-values, torch.Generator().manual_seed(0))
    assert torch.equal(negative, -rounded)  # symmetric in sign: rounds the magnitude
    again = to_bfloat16_stochastically(values, torch.Generator().manual_seed(0))
    assert torch.equal(again, rounded)
    exact = torch.tensor([0.5, -3.0, 1024.0])  # bfloat16 values stay as they are
    assert torch.equal(to_bfloat16_stochastically(exact, torch.Generator()).float(), exact)


def small_update_model() -> tuple[PeftModel, dict[str, torch.Tensor]]:
    """A bfloat16 tiny model with a LoRA whose update is mostly under half a bfloat16 step of the
    weights, and the base weights as they were."""
    model = tiny_model(tiny_tokenizer()).to(torch.bfloat16)
    config = LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft = get_peft_model(model, config, autocast_adapter_dtype=True)
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.008)
    peft.eval()
    base = {name: p.detach().clone() for name, p in peft.get_base_model().named_parameters()}
    return peft, base


def step_at(values: torch.Tensor) -> torch.Tensor:
    """The larger of the steps from each bfloat16 value to its neighbours."""
    up = torch.nextafter(values, torch.full_like(values, float("inf"))).float() - values.float()
    down = values.float() - torch.nextafter(values, torch.full_like(values, float("-inf"))).float()
    return torch.maximum(up, down)


def updates(peft: PeftModel, base: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Over every adapted weight: the merged change, the exact update, and the weights' step."""
    changes, deltas, steps = [], [], []
    names = {id(p): n for n, p in peft.get_base_model().named_parameters()}
    for module in peft.modules():
        if isinstance(module, LoraLayer):
            weight = module.get_base_layer().weight
            before = base[names[id(weight)]]
            changes.append((weight.float() - before.float()).flatten())
            deltas.append(module.get_delta_weight("default").float().flatten())
            steps.append(torch.maximum(step_at(before), step_at(weight.detach())).flatten())
    return torch.cat(changes), torch.cat(deltas), torch.cat(steps)


def test_a_bfloat16_merge_keeps_a_small_update_on_average_and_unmerges_exactly() -> None:
    peft, base = small_update_model()
    merger = AdapterMerger(peft)
    merger.merge("default")
    change, delta, step = updates(peft, base)
    assert (delta.abs() / step).median() < 0.25  # most of the update is well under half a step
    # the merged change regresses on the update with slope ~1: it is kept on average
    assert (change @ delta / (delta @ delta)).item() == pytest.approx(1.0, abs=0.15)
    assert ((change - delta).abs() <= step).all()  # each weight within one step of exact
    first = change.clone()

    merger.unmerge()
    assert all(torch.equal(p, base[n]) for n, p in peft.get_base_model().named_parameters())
    merger.merge("default")  # the same weights again (the kept merge, from a fixed seed)
    assert torch.equal(updates(peft, base)[0], first)
    merger.unmerge()
    merger.forget("default")
    merger.merge("default")  # merged afresh: still the same weights
    assert torch.equal(updates(peft, base)[0], first)

    # rounding to nearest (PEFT's own merge on bfloat16) drops much of it
    nearest, _ = small_update_model()
    nearest.merge_adapter(["default"])
    change, delta, _ = updates(nearest, base)
    assert (change @ delta / (delta @ delta)).item() < 0.6
