"""Which LoRA adapters a running batch needs, and the model set up for them.

A batch of one adapter runs with it active (on CPU merged into the base weights:
``AdapterMerger``) and a batch of the base model alone with the adapters disabled; only a
mixed batch goes through PEFT's mixed-adapter forward (``adapter_names=[...]`` per row), which
re-indexes the sub-batch of each adapter in every LoRA layer at every step (64 rows of one
adapter, bundled model, CPU: 108 tokens/s mixed, 134 single, unmerged).

Rows join and leave a running batch, so its set of adapters changes while it runs: the model
is switched between these set-ups in the middle of a batch. The KV cache stays valid across a
switch: merged, unmerged and mixed forwards compute the same function (up to float round-off).
"""

from __future__ import annotations

import contextlib

from peft import PeftModelForCausalLM

from graphs.policies.lora_merge import AdapterMerger

BASE_ADAPTER = "__base__"
"""PEFT's name for "no adapter" in a mixed-adapter batch."""

_MIXED = "mixed"
_BASE = "base"


class AdapterSwitch:
    """Sets the model up for the adapters of the rows decoding now; one per running batch."""

    def __init__(self, peft: PeftModelForCausalLM | None, merger: AdapterMerger | None) -> None:
        self._peft = peft
        self._merger = merger
        self._state: tuple[str, str | None] | None = None
        self._disabled: contextlib.ExitStack | None = None

    @property
    def mixed(self) -> bool:
        return self._state is not None and self._state[0] == _MIXED

    def prepare(self, adapters: set[str | None]) -> None:
        """Set the model up for rows asking for ``adapters`` (None: the base model)."""
        if self._peft is None:
            return
        if len(adapters) > 1:
            target: tuple[str, str | None] = (_MIXED, None)
        else:
            only = next(iter(adapters))
            target = (_BASE, None) if only is None else ("adapter", only)
        if target == self._state:
            return
        self._leave_base()
        if target[0] == "adapter" and self._merger is not None:
            self._merger.merge(target[1])  # type: ignore[arg-type]
        elif target[0] == "adapter":
            if self._peft.active_adapter != target[1]:
                self._peft.set_adapter(target[1], inference_mode=True)
        else:
            if self._merger is not None:
                self._merger.unmerge()  # mixed batches and the base alone run unmerged
            if target[0] == _BASE:
                self._disabled = contextlib.ExitStack()
                self._disabled.enter_context(self._peft.disable_adapter())
        self._state = target

    def names(self, adapters: list[str | None]) -> list[str] | None:
        """The ``adapter_names`` argument of a forward pass over rows asking for ``adapters``
        (in row order), or None outside a mixed batch."""
        return [a or BASE_ADAPTER for a in adapters] if self.mixed else None

    def release(self) -> None:
        """The batch has ended: re-enable disabled adapters (a merge stays for the next batch)."""
        self._leave_base()
        self._state = None

    def _leave_base(self) -> None:
        if self._disabled is not None:
            self._disabled.close()
            self._disabled = None
