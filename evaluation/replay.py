"""Greedy answers remembered across the evaluations of one process, and replayed.

A retrain round evaluates policy sets that share seats: the critic's gate plays the actor
adapter its baseline played, so every first actor answer is the same request (same adapter,
messages and greedy decoding) asked again; ``sparring eval --against`` keeps the seats it does
not name. Replaying the remembered answer saves decoding it again and, since a bfloat16 batch's
results depend slightly on what else shares it, makes both sides of a comparison see exactly
the same answers from a seat they share: the critic's gate compares two critics on the same
actor answers, not on two near-copies of them.

Only model backends are replayed (in-process and OpenAI-compatible), and only greedy requests;
a replayed turn is recorded with the answer, token ids and logprobs it had.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict, replace
from typing import Any

from graphs.policies.base import Backend, GenerationRequest, GenerationResult

REPLAYED_BACKENDS = frozenset({"inprocess", "openai"})
"""Backends whose greedy answer to a request is the model's answer (a scripted bot may keep
state between calls, so its answers are never replayed)."""


class GreedyReplay:
    """Remembers the last ``max_answers`` greedy answers of the model backends it wraps."""

    def __init__(self, max_answers: int = 50_000) -> None:
        self.max_answers = max_answers
        self.replayed = 0
        """Requests answered from memory, since creation."""
        self._answers: OrderedDict[str, GenerationResult] = OrderedDict()
        self._wrapped: dict[int, Backend] = {}

    def wrap(self, backend: Backend) -> Backend:
        """``backend`` itself if its answers are not replayed, else one proxy per backend."""
        if backend.name not in REPLAYED_BACKENDS:
            return backend
        proxy = self._wrapped.get(id(backend))
        if proxy is None:
            proxy = self._wrapped[id(backend)] = _Replaying(backend, self)
        return proxy

    def key(self, backend: Backend, request: GenerationRequest) -> str | None:
        """What decides a greedy answer (the seed does not); None for a sampled request."""
        if request.sampling.temperature > 0:
            return None
        sampling = asdict(replace(request.sampling, seed=None))
        return json.dumps([id(backend), backend.model_name, request.adapter, request.messages, sampling,
                           _plain(request.choice), _plain(request.final)], sort_keys=True, default=list)

    def recall(self, key: str) -> GenerationResult | None:
        found = self._answers.get(key)
        if found is not None:
            self._answers.move_to_end(key)
            self.replayed += 1
        return found

    def remember(self, key: str, result: GenerationResult) -> None:
        self._answers[key] = result
        self._answers.move_to_end(key)
        while len(self._answers) > self.max_answers:
            self._answers.popitem(last=False)


class _Replaying:
    """A backend that answers a greedy request it has seen from memory; everything else is the
    wrapped backend's (its name, model, precision, adapters...)."""

    def __init__(self, backend: Backend, replay: GreedyReplay) -> None:
        self._backend = backend
        self._replay = replay

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # never the proxy's own fields (a copy looks them up before they are set)
            raise AttributeError(name)
        return getattr(self._backend, name)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        key = self._replay.key(self._backend, request)
        if key is not None and (found := self._replay.recall(key)) is not None:
            return replace(found, latency_s=0.0)  # nothing was decoded
        result = await self._backend.generate(request)
        if key is not None:
            self._replay.remember(key, result)
        return result


def _plain(value: Any) -> Any:
    return None if value is None else asdict(value)
