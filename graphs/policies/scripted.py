"""The scripted backend: rule-based bots for context seats and deterministic doubles for tests.

A bot is a plain callable ``(messages, request) -> str``. It may raise BackendError to inject
a model failure. A choice request (``request.choice``) calls the bot too, and its reply must
name one of the options (``named_option``): the result is the prefix followed by it. A request
with a final line (``request.final``) is served as two requests, the free text and then a
choice (``final_line.generate_in_two_requests``), so a subclass that refuses choice requests
acts as a backend that cannot constrain. Token
ids are the UTF-8 bytes of the text (the prompt rendered as
"role: content" lines) and every logprob is 0.0: they give results the shape of a real
backend's, but they are not any real tokenizer's ids and must not be trained on.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import sys
from collections.abc import Callable, Mapping
from itertools import count
from pathlib import Path

from graphs.judges import arithmetic
from graphs.judges.arithmetic import evaluate, format_number, plain_arithmetic
from graphs.policies.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    Message,
    UnknownAdapterError,
)
from graphs.policies.final_line import generate_in_two_requests

Bot = Callable[[list[Message], GenerationRequest], str]
"""Turns the conversation (and the full request, for its adapter or sampling) into a reply."""

BASE = "__base__"
"""Key of a replay script for requests that name no adapter."""


class ScriptedBackend:
    """A Backend whose replies come from a bot; ``model_name`` is ``scripted:<bot name>``."""

    name = "scripted"

    def __init__(self, bot: Bot, *, bot_name: str) -> None:
        self.model_name = f"scripted:{bot_name}"
        self.code = _code_digest(bot)
        """digest of the source file that defines the bot (None when it has none): part of an
        evaluation's key, so a bot whose code changed is played again, not read from the store"""
        self._bot = bot
        self._adapters: dict[str, str] = {}
        self.cut_notice: str | None = None
        """what the first reply cut at max_new_tokens said (printed once on stderr), None until then"""

    @classmethod
    def from_function(cls, bot: Bot, *, name: str | None = None) -> ScriptedBackend:
        """Wrap any bot callable; ``name`` defaults to the function's name."""
        return cls(bot, bot_name=name or getattr(bot, "__name__", "bot"))

    @classmethod
    def replay(
        cls,
        responses: list[str | BackendError] | Mapping[str, list[str | BackendError]],
        *,
        name: str = "replay",
    ) -> ScriptedBackend:
        """Reply with a fixed script, one entry per request, in order.

        A list serves every request; a mapping keeps one script per adapter name (``BASE``
        for requests without an adapter), as one base model serving several roles would. An
        entry that is a BackendError is raised instead of answered (failure injection). A
        request after the script's last entry raises BackendError rather than cycling, so
        a test learns when a game makes more calls than it scripted. A choice request re-reads
        the entry just replied (the free text that a final choice follows names the option), so
        a critique ending "Verdict: incorrect" is one entry.
        """
        scripts = {BASE: list(responses)} if isinstance(responses, list) else {k: list(v) for k, v in responses.items()}
        positions = {key: count() for key in scripts}
        last: dict[str, str] = {}

        def bot(messages: list[Message], request: GenerationRequest) -> str:
            key = request.adapter or BASE
            if key not in scripts:
                raise BackendError(f"replay has no script for {key!r}; scripted keys: {sorted(scripts)}")
            if request.choice is not None and key in last:
                return last[key]
            position = next(positions[key])
            script = scripts[key]
            if position >= len(script):
                raise BackendError(
                    f"replay script for {key!r} exhausted after {len(script)} responses; "
                    "add responses for the extra calls"
                )
            entry = script[position]
            if isinstance(entry, BackendError):
                raise entry
            last[key] = entry
            return entry

        return cls(bot, bot_name=name)

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if request.adapter is not None and request.adapter not in self._adapters:
            raise UnknownAdapterError(
                f"adapter {request.adapter!r} is not loaded on {self.model_name}; loaded: {self.adapters()}"
            )
        if request.final is not None:
            return await generate_in_two_requests(self, request)
        text = self._bot(request.messages, request)
        chosen = None
        if request.choice is not None:
            chosen = named_option(text, request.choice.options)
            text, finish_reason = request.choice.prefix + chosen, "stop"
        else:
            full = text
            text, finish_reason = _apply_limits(text, request)
            if finish_reason == "length" and self.cut_notice is None:
                self._notice_cut(len(full.encode()), request.sampling.max_new_tokens)
        return GenerationResult(
            text=text,
            prompt_token_ids=list(_render(request.messages).encode()),
            completion_token_ids=list(text.encode()),
            logprobs=[0.0] * len(text.encode()),
            finish_reason=finish_reason,
            served_by=request.adapter or self.model_name,
            chosen=chosen,
        )

    def _notice_cut(self, wrote: int, limit: int) -> None:
        """Say once, on stderr, that this bot's replies are being cut: a scripted token is one
        byte of text, so a bot writing code needs far more than a model's token budget."""
        self.cut_notice = (f"note: {self.model_name} wrote a reply of {wrote} bytes, cut at --max-new-tokens {limit} "
                           "(a scripted token is one byte); raise --max-new-tokens to let it answer in full")
        print(self.cut_notice, file=sys.stderr)

    async def load_adapter(self, name: str, path: str) -> None:
        loaded = self._adapters.get(name)
        if loaded is not None and loaded != path:
            raise BackendError(
                f"adapter {name!r} is already loaded from {loaded!r}; adapter names are immutable, "
                f"publish {path!r} under a new version"
            )
        self._adapters[name] = path

    async def unload_adapter(self, name: str) -> None:
        if name not in self._adapters:
            raise UnknownAdapterError(f"adapter {name!r} is not loaded; loaded: {self.adapters()}")
        del self._adapters[name]

    def adapters(self) -> list[str]:
        return sorted(self._adapters)

    async def aclose(self) -> None:
        self._adapters.clear()


def named_option(reply: str, options: tuple[str, ...]) -> str:
    """The option a bot's reply to a choice request names: the whole reply, or else the option
    named last as a whole word ("... Verdict: incorrect" names "incorrect", not "correct")."""
    if reply.strip() in options:
        return reply.strip()
    found = {
        option: match.start()
        for option in options
        for match in re.finditer(rf"(?<!\w){re.escape(option.strip())}(?!\w)", reply, re.IGNORECASE)
    }
    if not found:
        raise BackendError(
            f"the scripted reply {reply[:80]!r} names none of the options {list(options)}; a bot answering a "
            "choice request must name one of them"
        )
    return max(found, key=lambda option: (found[option], len(option)))


def _code_digest(bot: Bot) -> str | None:
    """The first 16 hex digits of the SHA-256 of the file defining ``bot`` and of the arithmetic
    the built-in bots share (``graphs.judges.arithmetic``): its helpers and constants live beside
    it, so whole files are hashed, not the function alone."""
    try:
        source = inspect.getsourcefile(bot)
        return _file_digest(source, arithmetic.__file__) if source else None
    except (TypeError, OSError):  # a builtin or a callable object without a source file
        return None


@functools.cache
def _file_digest(*paths: str) -> str:
    """Read and hashed once per process: every scripted backend of a bot file shares it."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:16]


def _render(messages: list[Message]) -> str:
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages)


def _apply_limits(text: str, request: GenerationRequest) -> tuple[str, str]:
    """Cut at the first stop string, then at max_new_tokens (one token per UTF-8 byte)."""
    for stop in request.sampling.stop:
        if stop and stop in text:
            text = text[: text.index(stop)]
    encoded = text.encode()
    if len(encoded) > request.sampling.max_new_tokens:
        return encoded[: request.sampling.max_new_tokens].decode(errors="ignore"), "length"
    return text, "stop"


# --- built-in bots -------------------------------------------------------------------------


def echo(messages: list[Message], request: GenerationRequest) -> str:
    """Repeats the last user message."""
    return last_user(messages)


def calculator(messages: list[Message], request: GenerationRequest) -> str:
    """An actor that evaluates the last arithmetic expression in the last user message
    ("What is 12 * (3 + 4)?"), else repeats the last number there; it does not read word
    problems, so it is a baseline, not an oracle."""
    value = calculate(last_user(messages))
    return f"Answer: {value}" if value is not None else "I cannot find a calculation to do."


BOTS: dict[str, Bot] = {"echo": echo, "calculator": calculator}
"""The bots of no game; games contribute theirs (``GameSpec.bots``, all of them by name:
``graphs.registry.known_bots``)."""


def last_user(messages: list[Message]) -> str:
    """The content of the last user message (\"\" when there is none)."""
    return next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")


_EXPRESSION = re.compile(r"[\d(][\d\s.+\-*/×÷()]*[\d)]")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def calculate(text: str) -> str | None:
    """The value of the last arithmetic expression in ``text``, else its last number; None when
    it has neither."""
    text = text.replace(",", "")
    for candidate in reversed(_EXPRESSION.findall(text)):
        if any(op in candidate for op in "+-*/×÷"):
            value = evaluate(plain_arithmetic(candidate))
            if value is not None:
                return format_number(value)
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


