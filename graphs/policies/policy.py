"""A policy fills a seat: a backend, an optional adapter and sampling parameters."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from graphs.policies.base import Backend, GenerationRequest, GenerationResult, Message, SamplingParams


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

    async def act(self, messages: list[Message], *, seed: int | None = None) -> GenerationResult:
        sampling = self.sampling if seed is None else replace(self.sampling, seed=seed)
        return await self.backend.generate(GenerationRequest(messages, sampling, self.adapter))
