"""A response that ends with a structured final line chosen by constrained decoding.

The model first writes freely, with its own sampling settings, exactly as without the final
line. Its text is cut where it starts the line itself (the marker's first word, any case: what
follows is its own, unconstrained verdict), then the marker is appended and one of the options
is picked by constrained decoding. One result comes back: text, token ids and logprobs of the
whole response (kept text + marker + option), with ``chosen`` set.

A request carries the final line in ``GenerationRequest.final``; each backend serves it:

- the in-process backend in one row of its decode loop: the marker and the option continue
  the row's own decoding, with no second prefill (``graphs.policies.final_decode``);
- the scripted and OpenAI-compatible backends with two requests (``generate_in_two_requests``):
  the free text, then a choice request (``base.Choice``) whose prefix is the text kept and the
  marker, which re-scores the free part. vLLM cannot express the cut at the marker in one
  guided request, so it keeps this path.

A backend that cannot constrain (``ChoiceUnsupportedError``: a plain OpenAI-compatible API)
gives the free text as it was written, with ``chosen`` None: the caller parses it as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from graphs.policies.base import (
    Backend,
    Choice,
    ChoiceUnsupportedError,
    GenerationRequest,
    GenerationResult,
)

_TRAILING = " \t\r\n*_#>`-"
"""Stripped from the end of the kept text: blank space and the markdown that opened the line
the cut removed (``**Verdict:** ...``)."""


@dataclass(frozen=True)
class FinalChoice:
    """The response's last line is ``marker`` followed by one of ``options``, e.g. ``Verdict:``
    and (" correct", " incorrect"): an option carries its leading space, so that it is tokenized
    as the model writes it after the marker."""

    marker: str
    options: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.marker.strip():
            raise ValueError("a final choice needs a non-blank marker, e.g. 'Verdict:'")
        Choice(self.options)  # validates the options

    def body(self, text: str) -> str:
        """The free text before the model's own start of the final line (the first occurrence
        of the marker's first word, in any case), without trailing blanks and markdown."""
        word = self.marker.split()[0].rstrip(":")
        found = re.search(re.escape(word), text, re.IGNORECASE)
        return (text if found is None else text[: found.start()]).rstrip(_TRAILING)

    def prefix(self, body: str) -> str:
        """What precedes the option: the kept text, a new line and the marker."""
        return f"{body}\n{self.marker}" if body else self.marker

    def record(self, result: GenerationResult) -> dict[str, object]:
        """What a turn stores about its final line."""
        return {
            "marker": self.marker,
            "options": [o.strip() for o in self.options],
            "chosen": None if result.chosen is None else result.chosen.strip(),
            "constrained": result.chosen is not None,
        }


async def generate_with_final_choice(
    backend: Backend, request: GenerationRequest, final: FinalChoice
) -> GenerationResult:
    """Free text, then ``final.marker`` and one of ``final.options`` chosen by the backend."""
    return await backend.generate(replace(request, final=final))


async def generate_in_two_requests(backend: Backend, request: GenerationRequest) -> GenerationResult:
    """Serve ``request.final`` with two plain requests to ``backend``: the free text, then a
    choice request after the text kept (for backends that cannot continue a row)."""
    final = request.final
    assert final is not None
    free = await backend.generate(replace(request, final=None))
    try:
        chosen = await backend.generate(
            replace(request, final=None, choice=Choice(final.options, final.prefix(final.body(free.text))))
        )
    except ChoiceUnsupportedError:
        return free
    return replace(chosen, latency_s=free.latency_s + chosen.latency_s)
