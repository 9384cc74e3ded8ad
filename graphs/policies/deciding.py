"""Evaluations that decide play where no answer depends on what shares its batch.

The in-process backend decodes every request it holds in one batch. In bfloat16 with torch's
own kernels a greedy answer then depends on what else shares its batch: each sum keeps 8 bits
of mantissa, and the order in which the kernels add up a row follows the batch's shape, so a
near-tie between two tokens can fall either way. An evaluation that decides (a gate, `sparring
eval`, the retrain report) would move with things it does not measure, such as the other seat's
prompts.

Two ways out, chosen by ``deciding_dtype``:

- float32 (the default, and wherever the other is not available), which keeps 24 bits and
  makes those differences about 65,000 times smaller; they can still flip an exact near-tie,
  but no longer a whole evaluation's worth of answers.
- With ``eval_dtype`` "auto" on a CPU where bfloat16 is measured faster than float32
  (``graphs.policies.cpu_precision``), the in-process backend
  plays bfloat16 with kernels whose rows do not depend on their batch
  (``graphs.policies.batch_invariant``), games and evaluations alike: evaluations play on the
  backend that plays.

``FloatTwins`` maps a policy set onto float32 twins of the in-process backends that play in
another precision: one twin per backend, loaded on first use, with each adapter a policy
names loaded from the folder the playing backend loaded it from (and dropped once the playing
backend drops it). Other backends (scripted bots, vLLM, hosted APIs) are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from graphs.policies.base_models import resolve_device
from graphs.policies.cpu_precision import bfloat16_pays
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.policy import Policy

DECIDING_PRECISION = "float32"
"""The twins' precision."""


def deciding_dtype(dtype: str, eval_dtype: str, device: str, cache_dir: Path | None = None) -> str:
    """The in-process model's dtype in evaluations that decide, from the settings ``dtype`` (the
    playing precision), ``eval_dtype`` and ``device``: ``eval_dtype`` "auto" is bfloat16 where the
    model plays batch-invariant bfloat16 (a CPU where bfloat16 is measured faster,
    ``cpu_precision.bfloat16_pays``, its measurement kept in ``cache_dir``; ``dtype`` auto or
    bfloat16), else float32; "same" is ``dtype``; "float32" is float32."""
    if eval_dtype == "same":
        return dtype
    if eval_dtype == "auto" and dtype in ("auto", "bfloat16") and resolve_device(device).type == "cpu" \
            and bfloat16_pays(cache_dir):
        return "bfloat16"
    return DECIDING_PRECISION


class FloatTwins:
    """``await twins(policies)``: the same policies, each in-process one on a float32 twin."""

    def __init__(self, load: Callable[[InProcessBackend], InProcessBackend]) -> None:
        """``load(backend)``: a float32 copy of ``backend``'s base model, with no adapter."""
        self._load = load
        self._twins: dict[int, InProcessBackend] = {}

    async def __call__(self, policies: Mapping[str, Policy]) -> dict[str, Policy]:
        mapped = {}
        for seat, policy in policies.items():
            backend = policy.backend
            if not isinstance(backend, InProcessBackend) or backend.precision == DECIDING_PRECISION:
                mapped[seat] = policy
                continue
            twin = await self._twin(backend)
            if policy.adapter and policy.adapter not in twin.adapters():
                await twin.load_adapter(policy.adapter, str(backend.adapter_path(policy.adapter)))
            mapped[seat] = replace(policy, backend=twin)
        return mapped

    async def _twin(self, backend: InProcessBackend) -> InProcessBackend:
        twin = self._twins.get(id(backend))
        if twin is None:
            twin = self._twins[id(backend)] = self._load(backend)
        for name in twin.adapters():  # a version the playing backend let go (a rejected candidate) goes too
            if name not in backend.adapters():
                await twin.unload_adapter(name)
        return twin
