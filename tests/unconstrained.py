"""A scripted backend that cannot constrain a final line, as a plain OpenAI-compatible API."""

from __future__ import annotations

from graphs.policies.base import ChoiceUnsupportedError, GenerationRequest, GenerationResult
from graphs.policies.scripted import ScriptedBackend


class UnconstrainedBackend(ScriptedBackend):
    """Answers choice requests with ``ChoiceUnsupportedError``: callers fall back to parsing the free text."""

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if request.choice is not None:
            raise ChoiceUnsupportedError("no guided decoding")
        return await super().generate(request)
