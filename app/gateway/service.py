"""One model call through the gateway: name -> policy, episode and seat, generation, turn.

Generation goes through ``Policy.act`` on the backend ``sparring play`` uses, so every client's
requests meet in the same queue (the in-process backend's continuous batching). A turn records
the adapter that actually served it; a backend that answers with another one is an error,
never logged as if the requested one had played.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from app.gateway.book import Book, Caller, OpenEpisode
from app.gateway.errors import GatewayError
from app.gateway.naming import BASE, ModelNames
from app.gateway.schemas import ChatMessageIn, OpenAIRequest
from graphs.policies.base import BackendError, GenerationResult, Message, SamplingParams
from graphs.policies.policy import Policy
from storage.records import EpisodeStatus, TurnRecord

DEFAULT_MAX_TOKENS = 256
DEFAULT_SEAT = "agent"
"""the seat of a call to ``base`` that names none (a call to ROLE or ROLE@vN plays seat ROLE)"""
EPISODE_HEADER, SEAT_HEADER, CONVERSATION_HEADER = "x-sparring-episode", "x-sparring-seat", "x-sparring-conversation"
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


@dataclass(frozen=True)
class Reply:
    result: GenerationResult
    turn: TurnRecord
    policy: Policy


@dataclass
class Gateway:
    names: ModelNames
    book: Book
    max_tokens: int
    """the most tokens a request may ask for (at most the model's context)"""

    async def call(self, model: str, messages: list[Message], sampling: SamplingParams, caller: Caller) -> Reply:
        policy = await self.names.policy(model)
        episode, seat = await self.book.place(caller, DEFAULT_SEAT if model == BASE else model.partition("@")[0])
        started = time.perf_counter()
        try:
            result = await replace(policy, sampling=sampling).act(messages)
            if policy.adapter is not None and result.served_by != policy.adapter:
                raise BackendError(f"the backend served {result.served_by!r} instead of {policy.adapter!r}")
        except BackendError as exc:
            self._failed(episode, f"{seat} turn {episode.turns}", exc)
            raise GatewayError(502, f"the model failed to answer: {exc}", "model_error") from exc
        return Reply(result, self.book.turn(episode, seat, policy, messages, sampling, result, started), policy)

    def _failed(self, episode: OpenEpisode, where: str, exc: BackendError) -> None:
        """A one-turn episode whose call failed ends failed; a client's episode stays open for its next call."""
        if episode.standalone:
            self.book.end(episode.id, EpisodeStatus.FAILED, error=f"{where}: {exc}")

    def sampling_of(self, request: OpenAIRequest, max_tokens: int | None) -> SamplingParams:
        if request.n != 1:
            raise GatewayError(400, f"n={request.n}: the gateway answers one choice per request (each is a turn); "
                               "send n requests instead", "unsupported_parameter", "n")
        wanted = max_tokens or DEFAULT_MAX_TOKENS
        if wanted > self.max_tokens:
            raise GatewayError(400, f"max_tokens={wanted} is more than this gateway serves ({self.max_tokens}, bounded "
                               "by the model's context): ask for fewer", "max_tokens_too_large", "max_tokens")
        stop = (request.stop,) if isinstance(request.stop, str) else tuple(request.stop or ())
        temperature = 1.0 if request.temperature is None else request.temperature
        return SamplingParams(temperature=temperature, top_p=request.top_p or 1.0, max_new_tokens=wanted,
                              seed=request.seed, stop=stop)


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
