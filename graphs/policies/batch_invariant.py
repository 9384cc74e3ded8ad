"""A model whose rows do not depend on what shares their batch, for bfloat16 on a CPU.

In bfloat16 a greedy answer can move with its batch: a matrix product's kernel adds up a row
in an order chosen by how many rows the product has, and attention adds up a row's positions
in an order that follows the padding other rows force on it. Rounded to 8 bits of mantissa, a
near-tie between two tokens then falls either way (docs/results/2026-11-29-bfloat16-batch-invariance.md).

Two changes remove both, with the weights and the function unchanged:

- **Products of a fixed number of rows.** Every linear layer multiplies its input ``ROWS`` rows
  at a time, the last block padded with zeros, so the kernel sees one shape whatever the batch
  and adds up each row in the same order (``fix_rows``). LoRA layers loaded later are linear
  layers too: call ``fix_rows`` again after loading an adapter.
- **Attention whose sums start at each row's first key** (``ATTENTION``). A row's keys sit after
  the left padding its batch gives it, and the kernels add up positions in blocks counted from
  the first column, so the same keys would be added in another order beside other rows. Before
  the two sums over positions (the softmax's and the weights times the values) each row's
  scores and values are moved to start at column 0 and padded with zeros to a multiple of
  ``ROWS`` columns: only zeros after its keys change with the batch, and adding an exact zero
  changes nothing. Each key-value head attends for its group of query heads in one product
  (grouped-query attention), without copying keys and values per query head. transformers'
  ``sdpa`` kernel on a CPU instead splits the positions into blocks whose bounds move with the
  padding.

What is guaranteed is what ``tests/test_batch_invariant.py`` and bench/batch_invariance.py check:
a row's logits bit for bit, alone and beside other rows of other lengths, on the CPU they run
on. The kernels are torch's; a torch that changes them can change this, which the test would
show. Speed: bench/batch_invariance.py measures it against float32 and plain bfloat16.
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AttentionMaskInterface, PreTrainedModel
from transformers.masking_utils import eager_mask

ROWS = 64
"""Rows per matrix product: enough for the kernels to run near their speed on the bundled
model's shapes, few enough that a small batch pads little (bench/batch_invariance.py)."""

BATCH_INVARIANT = "batch-invariant"
"""What an in-process backend's ``kernels`` says of such a model (part of an evaluation's key)."""

ATTENTION = "sparring_grouped"
"""The attention implementation's name in transformers' registry."""

_FIXED = "_sparring_fixed_rows"
"""Marks a linear layer whose forward ``fix_rows`` replaced."""


def grouped_attention(
    module: torch.nn.Module | None,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: softmax(q k^T * scaling + mask) v per key-value head for
    its group of query heads (grouped-query attention), softmax in float32, each row's positions
    moved to start at 0 before the sums over positions."""
    batch, heads, queries, dim = query.shape
    kv_heads, positions = key.shape[1], key.shape[2]
    group = heads // kv_heads
    grouped = query.reshape(batch, kv_heads, group * queries, dim)
    scores = torch.matmul(grouped, key.transpose(2, 3)) * scaling  # sums over dim only: no position moves it
    if attention_mask is None:
        weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        out = torch.matmul(weights, value)
        return out.view(batch, heads, queries, dim).transpose(1, 2).contiguous(), None
    index, hidden = _alignment(attention_mask, positions)
    width = index.shape[1]
    aligned_scores = torch.gather(scores.view(batch, kv_heads, group, queries, positions), 4,
                                  index[:, None, None, None, :].expand(batch, kv_heads, group, queries, width))
    aligned_scores = aligned_scores.masked_fill(hidden, float("-inf"))
    weights = F.softmax(aligned_scores.view(batch, kv_heads, group * queries, width), dim=-1, dtype=torch.float32)
    weights = torch.nan_to_num(weights, nan=0.0).to(query.dtype)  # a padding query sees no key: zeros
    out = torch.matmul(weights, _aligned_values(value, index)).view(batch, heads, queries, dim)
    return out.transpose(1, 2).contiguous(), None


def _alignment(attention_mask: torch.Tensor, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(index, hidden): the column of each row's i-th key (batch, width), and whether query q
    of the row may not see it (batch, 1, 1, queries, width). Every layer of a forward pass gets the same
    mask, so the last one's alignment is kept (per thread) and used again."""
    last = getattr(_last_alignment, "value", None)
    if last is not None and last[0] is attention_mask and last[1] == positions:
        return last[2]
    mask = attention_mask[:, 0, :, :positions]  # (batch, queries, positions), additive or boolean
    allowed = mask if mask.dtype == torch.bool else mask == 0
    batch, queries = allowed.shape[:2]
    starts = allowed.any(dim=1).to(torch.int8).argmax(dim=-1)  # each row's first key (left padding before it)
    width = -(-int((positions - starts).max()) // ROWS) * ROWS
    index = starts[:, None] + torch.arange(width, device=mask.device)
    outside = index >= positions
    index = index.clamp(max=positions - 1)
    aligned_allowed = torch.gather(allowed, 2, index[:, None, :].expand(batch, queries, width)) & ~outside[:, None]
    hidden = ~aligned_allowed[:, None, None]
    _last_alignment.value = (attention_mask, positions, (index, hidden))  # holds the mask: its id is not reused
    return index, hidden


_last_alignment = threading.local()


def _aligned_values(value: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(batch, kv_heads, width, dim): each row's values at ``index`` (batch, width), as one
    ``index_select`` of rows of ``dim`` values from the memory the values view."""
    batch, kv_heads, _, dim = value.shape
    if value.stride(3) != 1 or value.stride(2) != dim or value.stride(1) % dim or value.stride(0) % dim:
        value = value.contiguous()
    count = (value.untyped_storage().nbytes() // value.element_size() - value.storage_offset()) // dim
    rows = value.as_strided((count, dim), (dim, 1), value.storage_offset())
    first_row = (torch.arange(batch, device=index.device)[:, None, None] * (value.stride(0) // dim)
                 + torch.arange(kv_heads, device=index.device)[None, :, None] * (value.stride(1) // dim))
    flat = (first_row + index[:, None, :]).reshape(-1)
    return rows.index_select(0, flat).view(batch, kv_heads, -1, dim)


AttentionInterface.register(ATTENTION, grouped_attention)
AttentionMaskInterface.register(ATTENTION, eager_mask)


def _fixed_rows_forward(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    rows = flat.shape[0]
    pad = -rows % ROWS
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad, flat.shape[1])])
    out = torch.cat([F.linear(block, layer.weight, layer.bias) for block in flat.split(ROWS)])
    return out[:rows].reshape(*x.shape[:-1], out.shape[-1])


def fix_rows(model: torch.nn.Module) -> int:
    """Make every linear layer of ``model`` multiply ``ROWS`` rows at a time (layers already
    changed are left alone); returns how many it changed."""
    changed = 0
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear) and not getattr(layer, _FIXED, False):
            layer.forward = _fixed_rows_forward.__get__(layer)  # type: ignore[method-assign]
            setattr(layer, _FIXED, True)
            changed += 1
    return changed


def make_batch_invariant(model: PreTrainedModel) -> None:
    """Fixed-row products and grouped attention on ``model`` (in place)."""
    model.set_attn_implementation(ATTENTION)
    fix_rows(model)
