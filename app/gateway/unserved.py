"""Request fields the gateway does not serve, refused by name (400) with what it serves instead.

A field is refused only when its value asks for something the backends do not do: its neutral
value (``n`` 1, ``tool_choice`` "none", ``response_format`` text, a penalty of 0...) is taken,
so clients that send defaults work. Serving such a request without the field would return, and
log, a reply other than the one asked for (an ignored penalty or logit bias also changes which
distribution the logged logprobs come from). Fields that change nothing about the reply
(``user``, ``store``, ``service_tier``, ``parallel_tool_calls``...) and fields the gateway does
not know are accepted and ignored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from app.gateway.errors import GatewayError


@dataclass(frozen=True)
class Unserved:
    name: str
    served: Callable[[Any], bool]
    """whether a value of the field is one the gateway honours"""
    instead: str
    """what the gateway serves, and how to ask for it"""


def _unset(value: Any) -> bool:
    return value is None or value in (0, False, "", [], {})


def _one(value: Any) -> bool:
    return value in (None, 1)


def _no_tool(value: Any) -> bool:
    return value in (None, "none")


def _text_format(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and value.get("type") == "text")


def _text_modality(value: Any) -> bool:
    return value is None or value == ["text"]


def _no_top_k(value: Any) -> bool:
    return value in (None, 0, -1)


def _no_repetition_penalty(value: Any) -> bool:
    return value in (None, 1)


NO_TOOLS = "plain chat without tool calls: describe the tools in the prompt and parse the reply"
SAMPLING = "temperature, top_p, seed and stop: leave the field out"
FREE_TEXT = "free text: describe the format in the prompt"

SHARED = (
    Unserved("n", _one, "one choice per request (each is a turn): send n requests"),
    Unserved("best_of", _one, "one sample per request (each is a turn): send several requests"),
    Unserved("frequency_penalty", _unset, SAMPLING),
    Unserved("presence_penalty", _unset, SAMPLING),
    Unserved("repetition_penalty", _no_repetition_penalty, SAMPLING),
    Unserved("logit_bias", _unset, SAMPLING),
    Unserved("top_k", _no_top_k, SAMPLING),
    Unserved("min_p", _unset, SAMPLING),
    Unserved("min_tokens", _unset, SAMPLING),
    Unserved("use_beam_search", _unset, SAMPLING),
    Unserved("response_format", _text_format, 'text replies (response_format {"type": "text"}): ask for JSON in '
             "the prompt"),
    Unserved("guided_json", _unset, FREE_TEXT),
    Unserved("guided_regex", _unset, FREE_TEXT),
    Unserved("guided_choice", _unset, FREE_TEXT),
    Unserved("guided_grammar", _unset, FREE_TEXT),
    Unserved("structured_outputs", _unset, FREE_TEXT),
)
"""what chat and text completions both refuse (vLLM's sampling extras included)"""

CHAT = (
    *SHARED,
    Unserved("tools", _unset, NO_TOOLS),
    Unserved("tool_choice", _no_tool, NO_TOOLS),
    Unserved("functions", _unset, NO_TOOLS),
    Unserved("function_call", _no_tool, NO_TOOLS),
    Unserved("top_logprobs", _unset, "the sampled token's logprob only: logprobs true, top_logprobs 0 or left out"),
    Unserved("audio", _unset, "text: leave audio out"),
    Unserved("modalities", _text_modality, 'text: modalities ["text"] or left out'),
    Unserved("prediction", _unset, "generation from the prompt alone: leave prediction out"),
    Unserved("reasoning_effort", _unset, "models that take no reasoning setting: leave it out"),
    Unserved("verbosity", _unset, "models that take no verbosity setting: leave it out"),
    Unserved("web_search_options", _unset, "no web search: put what the model needs in the prompt"),
)
COMPLETIONS = (
    *SHARED,
    Unserved("logprobs", _unset, "the sampled tokens' logprobs without alternatives: logprobs 0"),
    Unserved("echo", _unset, "the reply without the prompt"),
    Unserved("suffix", _unset, "a reply after the prompt, nothing to insert before a suffix"),
)


def refuse_unserved(request: BaseModel, fields: tuple[Unserved, ...]) -> None:
    """A 400 naming the first field of ``request`` that asks for what the gateway does not serve."""
    for field in fields:
        value = getattr(request, field.name, None)
        if not field.served(value):
            raise GatewayError(400, f"{field.name}={_shown(value)} is not served by the gateway; it serves "
                               f"{field.instead}", "unsupported_parameter", field.name)


def refuse_tool_calls(messages: list[BaseModel]) -> None:
    """A 400 for an assistant message that carries tool calls (the gateway serves none)."""
    for i, message in enumerate(messages):
        for name in ("tool_calls", "function_call"):
            if not _unset(getattr(message, name, None)):
                raise GatewayError(400, f"messages[{i}].{name}: the gateway serves {NO_TOOLS}",
                                   "unsupported_message", f"messages[{i}].{name}")


def _shown(value: Any) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 80 else shown[:77] + "..."
