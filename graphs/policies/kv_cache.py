"""A KV cache whose layers grow in place, for the in-process backend's decode loop.

transformers' ``DynamicLayer`` appends each step's keys and values with ``torch.cat``, which
copies the layer's whole cache every step: the copy grows with the cache, and on a CPU it is
paid in memory bandwidth. This layer gives the same tokens without that copy (bench/kv_cache.py
measures both; docs/results/2026-11-27-benchmarks.md).

``GrowingLayer`` keeps its keys and values in buffers with spare positions and exposes the
filled part as views (``keys`` and ``values``, as ``DynamicLayer`` does); a step writes its
new positions into the spare ones. When they run out, the buffers are copied once into larger
ones (``HEADROOM`` spare positions more). Code that replaces ``keys`` and ``values`` outright
(the batch's ``keep`` and ``merge``, transformers' own batch helpers) keeps working: the layer
sees that they are no longer its views and copies them into new buffers at the next update.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import DynamicLayer

HEADROOM = 64
"""Spare positions a layer allocates when it grows: one copy of the cache every 64 decode steps
instead of one every step, for 64 positions more of memory (on the bundled model 0.6 GB at 200
rows, float32)."""


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that writes new positions into spare room instead of concatenating."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        """(keys, values) with spare positions."""
        self._views: tuple[torch.Tensor, torch.Tensor] | None = None
        """The views of them last handed out as ``keys`` and ``values``."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, added = self.get_seq_length(), key_states.shape[-2]
        if not self._owns_views() or length + added > self.capacity:
            self._reallocate(length, length + added + HEADROOM, key_states)
        keys, values = self._buffers  # type: ignore[misc]
        keys[..., length : length + added, :].copy_(key_states)
        values[..., length : length + added, :].copy_(value_states)
        self.keys, self.values = keys[..., : length + added, :], values[..., : length + added, :]
        self._views = (self.keys, self.values)
        return self.keys, self.values

    @property
    def capacity(self) -> int:
        """Positions the buffers hold, filled or not (0 before the first update)."""
        return 0 if self._buffers is None else self._buffers[0].shape[-2]

    def _owns_views(self) -> bool:
        """Whether ``keys`` and ``values`` are still the views this layer handed out (code that
        replaced them, even by a view of the same memory, gets new buffers: always correct)."""
        return self._views is not None and self.keys is self._views[0] and self.values is self._views[1]

    def _reallocate(self, length: int, capacity: int, like: torch.Tensor) -> None:
        """New buffers of ``capacity`` positions, holding the ``length`` cached ones."""
        rows, heads, _, dim = like.shape  # the new positions come for every cached row and head

        def grown(current: torch.Tensor) -> torch.Tensor:
            buffer = like.new_empty((rows, heads, capacity, dim))
            if length:
                buffer[..., :length, :].copy_(current)
            return buffer

        self._buffers = (grown(self.keys), grown(self.values))


class GrowingCache(DynamicCache):
    """``DynamicCache(config=...)`` with a ``GrowingLayer`` for each plain layer (sliding-window
    and other kinds of layers are kept as transformers makes them)."""

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config=config)
        self.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in self.layers]
