"""A response that ends with a structured final line chosen by constrained decoding.

The model first writes freely, with its own sampling settings, exactly as without the final
line. Its text is cut where it starts the line itself (the marker's first word, any case: what
follows is its own, unconstrained verdict), then the backend appends the marker and picks one
of the options with a choice request (``base.Choice``) whose prefix is the text kept. One
result comes back: text, token ids and logprobs of the whole response, as the choice request
scored them (the free part is re-scored, not re-sampled).

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
    free = await backend.generate(request)
    body = final.body(free.text)
    prefix = f"{body}\n{final.marker}" if body else final.marker
    try:
        chosen = await backend.generate(replace(request, choice=Choice(final.options, prefix)))
    except ChoiceUnsupportedError:
        return free
    return replace(chosen, latency_s=free.latency_s + chosen.latency_s)
