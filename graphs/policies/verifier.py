"""The backend of a judge seat filled by a trained verifier: ``--seat judge=verifier:NAME``.

NAME is a reward model published by ``sparring train reward`` (``verifier@v2``, or a role
name for its active version; ``app.wiring`` resolves it in the registry). The backend serves
the judge's request like a model would, without generating: it reads the candidate answers
from the judge prompt, scores them with the reward model and answers with a rationale (every
score) and the verdict line naming the best one (``graphs.judges.reward_verifier``); the games
whose judge prompts it reads are given to it, each with its reader (``GameSpec.judge_prompt``). A judge
request with a final line (the ensemble's ``Pick:``) gets the verdict as that line, with
``chosen`` set, as a constrained model would give it.

A verifier's turn is logged like any judge turn (policy ``BASE+NAME``, served by NAME,
backend ``verifier``), without token ids or logprobs: nothing was generated.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from graphs.judges.reward_verifier import JudgePromptError, JudgePromptReader, decide, read_judge_prompt
from graphs.policies.base import (
    BackendError,
    ChoiceUnsupportedError,
    GenerationRequest,
    GenerationResult,
    UnknownAdapterError,
)

if TYPE_CHECKING:
    from graphs.policies.reward_model import RewardModel

VERIFIER_PREFIX = "verifier:"
"""A seat spec naming a trained verifier: ``verifier:ROLE@vN`` or ``verifier:ROLE``."""


def verifier_name(spec: str) -> str | None:
    """The NAME of a ``verifier:NAME`` seat spec; None for any other spec."""
    return spec.removeprefix(VERIFIER_PREFIX) if spec.startswith(VERIFIER_PREFIX) else None


class VerifierBackend:
    """Serves one reward model's verdicts on judge prompts (scored on a worker thread, one at a time)."""

    name = "verifier"

    def __init__(self, reward_model: RewardModel, *, model_name: str,
                 readers: Mapping[str, JudgePromptReader]) -> None:
        self.model_name = model_name
        """the base model, as the settings name it"""
        self._readers = dict(readers)
        """game name -> the reader of its judge prompt (``GameSpec.judge_prompt``)"""
        self._reward_model: RewardModel | None = reward_model
        self._lock = asyncio.Lock()

    @property
    def _model(self) -> RewardModel:
        if self._reward_model is None:
            raise BackendError("the verifier backend is closed")
        return self._reward_model

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        model = self._model
        if request.adapter != model.name:
            raise UnknownAdapterError(f"this verifier backend serves {model.name}, not {request.adapter!r}")
        if request.choice is not None:
            raise ChoiceUnsupportedError(f"verifier {model.name} answers judge prompts, not choice requests")
        try:
            prompt = read_judge_prompt(request.messages, self._readers)
        except JudgePromptError as exc:
            raise BackendError(f"verifier {model.name}: {exc}") from exc
        started = time.perf_counter()
        async with self._lock:
            scores = await asyncio.to_thread(model.score, prompt.scored())
        if not all(math.isfinite(score) for score in scores):
            raise BackendError(f"verifier {model.name} gave a score that is not a number: {scores}")
        best, rationale = decide(prompt, scores, verifier=model.name, threshold=model.threshold)
        verdict, chosen = prompt.verdict(best), None
        if request.final is None:
            text = f"{rationale}\n{verdict}"
        else:
            chosen = verdict.removeprefix(request.final.marker)
            if not verdict.startswith(request.final.marker) or chosen not in request.final.options:
                raise BackendError(f"verifier {model.name}: its verdict {verdict!r} is not one of the final lines "
                                   f"the judge asked for ({request.final.marker!r} + {request.final.options})")
            text = request.final.prefix(rationale) + chosen
        return GenerationResult(
            text=text,
            prompt_token_ids=[],
            completion_token_ids=[],
            logprobs=[],
            finish_reason="stop",
            served_by=model.name,
            latency_s=time.perf_counter() - started,
            chosen=chosen,
        )

    async def load_adapter(self, name: str, path: str) -> None:
        if name != self._model.name:
            raise BackendError(f"a verifier backend serves one reward model ({self._model.name}); "
                               f"{name} gets a backend of its own")

    async def unload_adapter(self, name: str) -> None:
        raise BackendError(f"a verifier backend serves one reward model ({self._model.name}) until it is closed")

    def adapters(self) -> list[str]:
        return [] if self._reward_model is None else [self._reward_model.name]

    async def aclose(self) -> None:
        self._reward_model = None
