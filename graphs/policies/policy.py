"""A policy fills a seat: a backend, an optional adapter and sampling parameters."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from graphs.policies.base import Backend, GenerationRequest, GenerationResult, Message, SamplingParams
from graphs.policies.final_line import FinalChoice, generate_with_final_choice


@dataclass(frozen=True)
class Policy:
    backend: Backend
    sampling: SamplingParams = field(default_factory=SamplingParams)
    adapter: str | None = None
    label: str = ""
    """How the policy is named in logs and queries; defaults to backend model (+ adapter)."""

    def __post_init__(self) -> None:
        if not self.label:
            base = self.backend.model_name
            object.__setattr__(self, "label", f"{base}+{self.adapter}" if self.adapter else base)

    async def act(
        self, messages: list[Message], *, seed: int | None = None, final: FinalChoice | None = None
    ) -> GenerationResult:
        """One turn; with ``final``, the response ends with a line chosen by constrained decoding."""
        sampling = self.sampling if seed is None else replace(self.sampling, seed=seed)
        request = GenerationRequest(messages, sampling, self.adapter)
        if final is not None:
            return await generate_with_final_choice(self.backend, request, final)
        return await self.backend.generate(request)
