"""One model call through the gateway: name -> policy, the reply's budget of tokens, episode and
seat, generation, turn.

Generation goes through ``Policy.act`` on the backend ``sparring play`` uses, so every client's
requests meet in the same queue (the in-process backend's continuous batching). A turn records
the adapter that actually served it; a backend that answers with another one is an error,
never logged as if the requested one had played.

The reply gets what the request asks (``max_tokens`` / ``max_completion_tokens``) when that fits
both the gateway's limit (``--max-tokens``) and what the model's context leaves after the prompt;
anything more is refused (400), as OpenAI and vLLM refuse it, rather than cut to fit: a reply cut
where the client did not ask would be logged, and trained on, as if it had been asked that way.
A request that asks nothing gets ``DEFAULT_MAX_TOKENS``, lowered to what fits.

A client that closes its connection while its call generates cancels the generation (the
in-process backend drops the row between two decode steps; the batch goes on for the others);
the call is logged as a turn with finish reason ``cancelled`` and no reply (``Book.turn``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from app.gateway.book import Book, Caller, OpenEpisode
from app.gateway.errors import GatewayError
from app.gateway.naming import BASE, ModelNames
from app.gateway.schemas import ChatMessageIn, OpenAIRequest
from graphs.policies.base import CANCELLED, Backend, BackendError, GenerationResult, Message, SamplingParams
from graphs.policies.policy import Policy
from storage.records import TurnRecord

T = TypeVar("T")
DEFAULT_MAX_TOKENS = 256
DEFAULT_SEAT = "agent"
"""the seat of a call to ``base`` that names none (a call to ROLE or ROLE@vN plays seat ROLE)"""
EPISODE_HEADER, SEAT_HEADER, CONVERSATION_HEADER = "x-sparring-episode", "x-sparring-seat", "x-sparring-conversation"
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ClientGone(Exception):
    """The client closed its connection before its reply was ready."""


@dataclass(frozen=True)
class Reply:
    result: GenerationResult
    turn: TurnRecord
    policy: Policy


@dataclass(frozen=True)
class Call:
    """A call ready to generate: what plays, in which episode and seat, with what sampling."""

    policy: Policy
    episode: OpenEpisode
    seat: str
    messages: list[Message]
    sampling: SamplingParams
    prompt_token_ids: list[int]
    """the prompt as the model reads it (empty when the backend has no tokenizer in this process)"""


@dataclass
class Gateway:
    names: ModelNames
    book: Book
    max_tokens: int
    """the most tokens a request may ask for (at most the model's context)"""
    context: int | None = None
    """how many tokens the model reads at most, prompt and reply together (None: not known here)"""

    async def place(self, request: OpenAIRequest, messages: list[Message], caller: Caller) -> Call:
        """All a call needs before it generates; the refusals (400, 404, 409, 503) come from here."""
        policy = await self.names.policy(request.model)
        prompt = await asyncio.to_thread(prompt_token_ids, policy.backend, messages)
        sampling = sampling_of(request, self.reply_budget(request, prompt))
        default_seat = DEFAULT_SEAT if request.model == BASE else request.model.partition("@")[0]
        episode, seat = await self.book.place(caller, default_seat)
        return Call(policy, episode, seat, messages, sampling, prompt or [])

    async def answer(self, call: Call, gone: Awaitable[None]) -> Reply:
        """Generate and log the call's turn. If ``gone`` completes first (the client left), the
        generation is cancelled, the turn logged as cancelled, and a 499 raised."""
        started = time.perf_counter()
        try:
            result = await unless_gone(self._generate(call), gone)
        except ClientGone:
            await self._log(call, cancelled(call), started)
            raise GatewayError(499, "the client closed its connection before the reply: its generation was "
                               f"cancelled and its turn logged with finish reason {CANCELLED!r}",
                               "client_closed_request") from None
        except BackendError as exc:
            await self.book.fail(call.episode, f"{call.seat} turn {call.episode.turns}: {exc}")
            raise GatewayError(502, f"the model failed to answer: {exc}", "model_error") from exc
        return Reply(result, await self._log(call, result, started), call.policy)

    def reply_budget(self, request: OpenAIRequest, prompt: list[int] | None) -> int:
        """How many tokens the reply may take (400 when what was asked does not fit)."""
        param, asked = request.reply_limit()
        if asked is not None and asked > self.max_tokens:
            raise GatewayError(400, f"{param}={asked} is more than this gateway serves ({self.max_tokens}, bounded "
                               "by the model's context): ask for fewer", "max_tokens_too_large", param)
        left = self._left_after(prompt, request.PROMPT)
        fits = self.max_tokens if left is None else min(self.max_tokens, left)
        if asked is None:
            return min(DEFAULT_MAX_TOKENS, fits)
        if asked > fits:
            raise GatewayError(400, f"{param}={asked} does not fit: the prompt is {len(prompt or ())} tokens of the "
                               f"model's context of {self.context}, which leaves {left} for the reply. Ask {param} "
                               f"of at most {left}, leave it out (the reply then gets up to "
                               f"{min(DEFAULT_MAX_TOKENS, fits)}), or shorten the {request.PROMPT}",
                               "context_length_exceeded", param)
        return asked

    def _left_after(self, prompt: list[int] | None, where: str) -> int | None:
        """Tokens the context leaves for a reply after ``prompt`` (None: unknown); 400 if none."""
        if self.context is None or prompt is None:
            return None
        left = self.context - len(prompt)
        if left < 1:
            raise GatewayError(400, f"the prompt is {len(prompt)} tokens and the model's context {self.context} "
                               f"tokens: nothing is left for a reply. Shorten the {where} (drop or summarise "
                               "earlier messages)", "context_length_exceeded", where)
        return left

    async def _generate(self, call: Call) -> GenerationResult:
        result = await replace(call.policy, sampling=call.sampling).act(call.messages)
        if call.policy.adapter is not None and result.served_by != call.policy.adapter:
            raise BackendError(f"the backend served {result.served_by!r} instead of {call.policy.adapter!r}")
        return result

    async def _log(self, call: Call, result: GenerationResult, started: float) -> TurnRecord:
        return await self.book.turn(call.episode, call.seat, call.policy, call.messages, call.sampling, result,
                                    started)


def sampling_of(request: OpenAIRequest, max_new_tokens: int) -> SamplingParams:
    stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
    temperature = 1.0 if request.temperature is None else request.temperature
    return SamplingParams(temperature=temperature, top_p=request.top_p or 1.0, max_new_tokens=max_new_tokens,
                          seed=request.seed, stop=stop)


def prompt_token_ids(backend: Backend, messages: list[Message]) -> list[int] | None:
    """The prompt's token ids as the in-process backend makes them (its tokenizer's chat
    template); None for a backend without a tokenizer here, or messages its template refuses
    (the backend then says why, as a model error)."""
    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is None:
        return None
    try:
        encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    except Exception:  # noqa: BLE001 (any template error: the backend reports it)
        return None
    return list(encoded["input_ids"])


def cancelled(call: Call) -> GenerationResult:
    """What a call whose client left is logged with: its prompt, no reply."""
    served_by = call.policy.adapter or call.policy.backend.model_name
    return GenerationResult(text="", prompt_token_ids=call.prompt_token_ids, completion_token_ids=[], logprobs=[],
                            finish_reason=CANCELLED, served_by=served_by)


async def unless_gone(work: Awaitable[T], gone: Awaitable[None]) -> T:
    """``work``'s result, unless ``gone`` completes first: then ``work`` is cancelled (and waited
    for) and ClientGone is raised."""
    task, watch = asyncio.ensure_future(work), asyncio.ensure_future(gone)
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the request itself is cancelled (the server stops)
        task.cancel()
        raise
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        await asyncio.wait((task,))
        raise ClientGone
    return task.result()


def caller_of(headers: Any, metadata: dict[str, Any] | None) -> Caller:
    """Where a call belongs: its headers first, then its body's ``metadata``."""
    meta = metadata or {}

    def said(header: str, key: str) -> str | None:
        value = headers.get(header) or meta.get(key)
        return None if value is None else str(value)

    return Caller(said(EPISODE_HEADER, "episode_id"), said(SEAT_HEADER, "seat"),
                  said(CONVERSATION_HEADER, "conversation_id"))


def chat_messages(messages: list[ChatMessageIn]) -> list[Message]:
    """OpenAI chat messages as the backends take them (text only)."""
    converted = []
    for i, message in enumerate(messages):
        role = ROLES.get(message.role)
        if role is None:
            raise GatewayError(400, f"messages[{i}].role {message.role!r}: the gateway serves "
                               f"{', '.join(ROLES)} messages (no tools)", "unsupported_message", f"messages[{i}]")
        content = message.content
        if isinstance(content, list):
            parts = [p for p in content if p.get("type") != "text" or not isinstance(p.get("text"), str)]
            if parts:
                raise GatewayError(400, f"messages[{i}]: only text parts are served, got {parts[0].get('type')!r}",
                                   "unsupported_message", f"messages[{i}].content")
            content = "".join(p["text"] for p in content)
        converted.append({"role": role, "content": content or ""})
    return converted
