"""Which positions' logits a forward pass computes (transformers' ``logits_to_keep``)."""

from __future__ import annotations

import torch


def last_positions(width: int, count: int, device: torch.device) -> torch.Tensor:
    """``logits_to_keep`` for the last ``count`` of ``width`` positions, as positions rather
    than the int: transformers then gathers a contiguous copy of those hidden states, where the
    int takes a strided slice, which a frozen bfloat16 ``lm_head`` (every model PEFT wraps)
    multiplies orders of magnitude slower on CPU (torch 2.13; docs/results/2026-11-25-main-job.md)."""
    return torch.arange(width - count, width, device=device)
