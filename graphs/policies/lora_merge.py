"""Serving one LoRA adapter at the base model's speed: merge it into the base weights.

An unmerged LoRA forward adds two small matmuls to every adapted layer; on CPU, decoding
with an all-linear rank-16 adapter ran at 0.78-0.9x of the base model (bundled model, 32
rows), merged at 1.0x. The in-process backend merges the adapter of a batch that uses only
one, and unmerges before any other batch.

Unmerging restores the base weights from a copy taken before the first merge: subtracting
the update back (PEFT's ``unmerge_adapter``) leaves float round-off in the weights, which
would grow with every switch between adapters. The copy costs one more set of the adapted
weights in memory, which is why only CPU serving merges.
"""

from __future__ import annotations

import torch
from peft import PeftModelForCausalLM
from peft.tuners.lora import LoraLayer


class AdapterMerger:
    def __init__(self, peft: PeftModelForCausalLM) -> None:
        self._peft = peft
        self._saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        """id of an adapted layer's base weight -> (the weight, its unmerged values)"""
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
        self._peft.merge_adapter([name])
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
