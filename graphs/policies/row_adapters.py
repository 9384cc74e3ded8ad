"""LoRA adapters chosen row by row on a batch-invariant model.

A batch-invariant model (``graphs.policies.batch_invariant``) keeps its adapters unmerged, so
every batch that runs one, the gates' batches above all (a candidate beside the base model or
beside another role's adapter), pays for the LoRA layers at every step. PEFT's mixed-adapter
forward gathers each adapter's rows, runs its LoRA matrices on them and adds the result back by
index, in each of the adapted layers at every step. Here each adapted linear layer instead runs
each adapter of the batch on all rows and zeroes the rows of the others before its second matrix
(``B`` times an exact zero adds an exact zero): no gather, no scatter, and the same arithmetic
for a row whatever its neighbours' adapters, as the layers multiply fixed numbers of rows.

The set-up is set before each forward pass (``use``), never through PEFT's active adapter or
its ``adapter_names`` argument, which these layers ignore. Plain LoRA on linear layers only:
variants (DoRA, aLoRA) keep their own forward in PEFT and are refused when loaded.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch
from peft.tuners.lora import Linear as LoraLinear
from peft.tuners.lora import LoraLayer

_ROWWISE = "_sparring_rowwise"
"""Marks a LoRA layer whose forward ``RowAdapters.install`` replaced."""


class UnsupportedAdapterError(ValueError):
    """An adapter that row-by-row LoRA cannot run (a LoRA variant, or a layer other than linear)."""


class RowAdapters:
    """Which adapter each row of the next forward passes runs, read by every adapted layer."""

    def __init__(self, dtype: torch.dtype) -> None:
        """``dtype``: the adapters' weights' (the row masks multiply their first matrix's output)."""
        self._dtype = dtype
        self.plan: tuple[tuple[str, torch.Tensor | None], ...] = ()
        """(adapter, mask of its rows or None for all rows), for each adapter of the batch"""

    def install(self, model: torch.nn.Module) -> None:
        """Replace the forward of ``model``'s LoRA layers (those already replaced are left alone);
        call after each adapter is loaded. UnsupportedAdapterError for a layer it cannot run."""
        for layer in model.modules():
            if not isinstance(layer, LoraLayer) or getattr(layer, _ROWWISE, False):
                continue
            if not isinstance(layer, LoraLinear):
                raise UnsupportedAdapterError(
                    f"batch-invariant serving runs LoRA on linear layers only, not on {type(layer).__name__}; "
                    "serve this adapter with SPARRING_EVAL_DTYPE=float32 (or SPARRING_DTYPE=float32)"
                )
            layer.forward = functools.partial(_forward, layer, self)  # type: ignore[method-assign]
            setattr(layer, _ROWWISE, True)

    @staticmethod
    def check_config(name: str, config: object) -> None:
        """UnsupportedAdapterError if the adapter's LoRA config asks for a variant."""
        for option in ("use_dora", "alora_invocation_tokens"):
            if getattr(config, option, None):
                raise UnsupportedAdapterError(
                    f"adapter {name!r} is a LoRA variant ({option}), which batch-invariant serving does not run; "
                    "serve it with SPARRING_EVAL_DTYPE=float32 (or SPARRING_DTYPE=float32)"
                )

    def use(self, adapters: Sequence[str | None]) -> None:
        """The next forward passes run row i on ``adapters[i]`` (None: the base model); a
        sequence of one adapter means every row, however many."""
        kinds = set(adapters)
        if len(kinds) == 1:
            (only,) = kinds
            self.plan = () if only is None else ((only, None),)
            return
        self.plan = tuple(
            (name, torch.tensor([a == name for a in adapters], dtype=self._dtype).view(-1, 1, 1))
            for name in sorted(k for k in kinds if k is not None)
        )


def _forward(layer: LoraLinear, rows: RowAdapters, x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
    """An adapted layer's forward: the base layer, plus each adapter's update on its rows."""
    result = layer.base_layer(x, *args, **kwargs)
    for name, mask in rows.plan:
        if name not in layer.lora_A:
            continue
        lora_a, lora_b = layer.lora_A[name], layer.lora_B[name]
        hidden = lora_a(x.to(lora_a.weight.dtype))  # dropout is off in inference
        if mask is not None:
            hidden = hidden * mask
        result = result + lora_b(hidden) * layer.scaling[name]
    return result
