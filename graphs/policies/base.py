"""The model-backend contract shared by the in-process, scripted and OpenAI-compatible backends.

A backend serves chat requests for one base model and any number of LoRA adapters loaded on
it. It is async so that many running episodes can await it at once; a backend that batches
(the in-process one) gathers those concurrent requests into one forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from graphs.policies.final_line import FinalChoice

Message = dict[str, str]
"""An OpenAI-style chat message: {"role": "system" | "user" | "assistant", "content": str}."""


class BackendError(RuntimeError):
    """A model call failed; the episode that made it is marked failed with this message."""


class UnknownAdapterError(BackendError):
    """A request named an adapter that the backend has not loaded."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request decoding settings.

    temperature 0 means greedy. ``seed`` makes a sampled request reproducible on its own,
    whatever else shares its batch.
    """

    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class Choice:
    """Constrained decoding: the response is ``prefix`` followed by exactly one of ``options``.

    The backend scores the prefix (it is forced, never sampled) and picks the option: the most
    likely one at temperature 0, else one drawn by its probability at the request's temperature
    (with its seed). ``max_new_tokens``, ``top_p`` and ``stop`` do not apply. The result's text,
    token ids and logprobs cover prefix and option, so a training row built from it is the
    sequence the model was scored on. An option's probability is that of its whole token
    sequence (in-process, ``choice.py``); vLLM's guided choice picks token by token, as a
    request's ``final`` line does in-process (``final_decode.py``): the two agree when the
    options differ in one token.
    """

    options: tuple[str, ...]
    prefix: str = ""

    def __post_init__(self) -> None:
        if not self.options or any(not isinstance(o, str) or not o for o in self.options):
            raise ValueError(f"a choice needs one or more non-empty option strings, got {self.options!r}")
        if len(set(self.options)) != len(self.options):
            raise ValueError(f"choice options must be distinct, got {self.options!r}")


class ChoiceUnsupportedError(BackendError):
    """The backend cannot constrain a response to a choice (a plain OpenAI-compatible API)."""


@dataclass(frozen=True)
class GenerationRequest:
    messages: list[Message]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    adapter: str | None = None
    """Name of a loaded LoRA adapter (immutable ``role@vN``), or None for the base model."""
    choice: Choice | None = None
    """Constrain the response to ``choice.prefix`` + one of ``choice.options`` (see Choice)."""
    final: FinalChoice | None = None
    """Free text (with ``sampling``), then a final line: the marker and one of the options,
    chosen by constrained decoding (see ``final_line``). ``chosen`` is set on the result, unless
    the backend cannot constrain (then the result is the free text)."""

    def __post_init__(self) -> None:
        if self.choice is not None and self.final is not None:
            raise ValueError(
                "a request has either a choice (the whole response is constrained) or a final line "
                "(free text, then a constrained line), not both"
            )


CANCELLED = "cancelled"
"""The finish reason of a request whose caller gave up before its reply (a row the in-process
backend drops; a gateway call whose client went away): no answer, never a training row."""


@dataclass(frozen=True)
class GenerationResult:
    text: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    """Log-probability of each completion token under the sampling distribution's model
    (before temperature), one per entry of ``completion_token_ids``."""
    finish_reason: str
    """"stop" (end of sequence or a stop string) or "length" (max_new_tokens reached); a turn
    logged for a caller that went away has ``CANCELLED``."""
    served_by: str
    """What actually served the request: the adapter name, or the base model's name."""
    latency_s: float = 0.0
    chosen: str | None = None
    """For a choice request: the option picked (the text is the prefix followed by it)."""


@runtime_checkable
class Backend(Protocol):
    """What every model backend implements."""

    name: str
    """Short backend kind for logs: "inprocess", "scripted", "openai"."""

    model_name: str
    """Name of the base model served (what ``served_by`` says when no adapter is used)."""

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        """Serve one chat request. Raises BackendError (UnknownAdapterError for an adapter
        that is not loaded, ChoiceUnsupportedError for a choice request it cannot constrain)."""
        ...

    async def load_adapter(self, name: str, path: str) -> None:
        """Load a LoRA adapter folder under an immutable name; loading the same name with
        the same path again is a no-op, with another path an error."""
        ...

    async def unload_adapter(self, name: str) -> None:
        """Unload an adapter; requests already running on it finish first."""
        ...

    def adapters(self) -> list[str]:
        """Names of the adapters loaded now."""
        ...

    async def aclose(self) -> None:
        """Release the model and any worker."""
        ...
