"""Serving one LoRA adapter at the base model's speed: merge it into the base weights.

An unmerged LoRA forward adds two small matmuls to every adapted layer; on CPU, decoding
with an all-linear rank-16 adapter ran at 0.78-0.9x of the base model (bundled model, 32
rows), merged at 1.0x. The in-process backend merges the adapter of a batch that uses only
one, and unmerges before any other batch.

Unmerging restores the base weights from a copy taken before the first merge: subtracting
the update back (PEFT's ``unmerge_adapter``) leaves float round-off in the weights, which
would grow with every switch between adapters. The copy costs one more set of the adapted
weights in memory, which is why only CPU serving merges.

bfloat16 weights keep 8 bits of mantissa, so rounding ``W + update`` to the nearest bfloat16
would give back ``W`` wherever the update is under half a step of the weight, which is most of
a small LoRA update. A bfloat16 merge rounds stochastically instead (up with probability the
fraction of the step, from a fixed seed): each weight is off by less than one step, but the
update survives on average over a layer's inputs, as it does when a float32 checkpoint is cast
to bfloat16 (how much of the update each rounding keeps, and what merging does to answers and
time: docs/results/2026-11-25-main-job.md). The rounded weights of the last adapter
are kept, so merging it again after a mixed batch draws no new noise; PEFT's own merge still runs
first each time (it is what tells PEFT's forward to skip the LoRA path), and its values are
overwritten.
"""

from __future__ import annotations

import torch
from peft import PeftModelForCausalLM
from peft.tuners.lora import LoraLayer

ROUNDING_SEED = 0
"""A merge is the same bfloat16 weights every time (evaluations are reproducible)."""


class AdapterMerger:
    def __init__(self, peft: PeftModelForCausalLM) -> None:
        self._peft = peft
        self._saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        """id of an adapted layer's base weight -> (the weight, its unmerged values)"""
        self._last: tuple[str, dict[int, torch.Tensor]] | None = None
        """bfloat16: the last adapter merged and its merged values, by weight id"""
        self.merged: str | None = None

    def merge(self, name: str) -> None:
        """Make ``name`` the active adapter, merged into the base weights."""
        if self.merged == name:
            return
        self.unmerge()
        with torch.no_grad():
            for module in self._peft.modules():
                if isinstance(module, LoraLayer):
                    weight = module.get_base_layer().weight
                    if id(weight) not in self._saved:  # layers of adapters loaded since are added
                        self._saved[id(weight)] = (weight, weight.detach().clone())
        self._peft.set_adapter(name, inference_mode=True)
        self._peft.merge_adapter([name])  # PEFT's bookkeeping (the forward skips LoRA); bfloat16 values are redone
        if self._peft.get_base_model().dtype == torch.bfloat16:
            self._merge_stochastically(name)
        self.merged = name

    def unmerge(self) -> None:
        """Restore the base weights exactly (no adapter merged)."""
        if self.merged is None:
            return
        self._peft.unmerge_adapter()  # PEFT's bookkeeping; the weights are then set back exactly
        with torch.no_grad():
            for weight, values in self._saved.values():
                weight.copy_(values)
        self.merged = None

    def forget(self, name: str) -> None:
        """``name`` is being unloaded: drop its kept merged values (call while it is not merged)."""
        if self._last is not None and self._last[0] == name:
            self._last = None

    @torch.no_grad()
    def _merge_stochastically(self, name: str) -> None:
        if self._last is None or self._last[0] != name:
            generator = torch.Generator().manual_seed(ROUNDING_SEED)
            merged: dict[int, torch.Tensor] = {}
            for module in self._peft.modules():
                if isinstance(module, LoraLayer) and name in module.lora_A:
                    weight = module.get_base_layer().weight
                    exact = self._saved[id(weight)][1].float() + module.get_delta_weight(name).float()
                    merged[id(weight)] = to_bfloat16_stochastically(exact, generator)
            self._last = (name, merged)
        for key, values in self._last[1].items():
            self._saved[key][0].copy_(values)


def to_bfloat16_stochastically(values: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """float32 ``values`` rounded to a neighbouring bfloat16, up (in magnitude) with probability
    the dropped fraction of the step: the expected result is ``values``. bfloat16 is the upper
    half of a float32's bits, so adding 16 random low bits then truncating does it."""
    bits = values.contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, values.shape, generator=generator, dtype=torch.int32)
    return ((bits + noise) & -(1 << 16)).view(torch.float32).to(torch.bfloat16)
