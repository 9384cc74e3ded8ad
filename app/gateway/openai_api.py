"""The OpenAI-compatible routes: /v1/models, /v1/chat/completions and /v1/completions.

The backends serve chat conversations, so /v1/completions takes its prompt as one user message
(the model's chat template applies): it is there for clients that only speak the legacy API,
not for raw continuation.

A response, streamed or whole, starts once its reply is ready (the in-process backend answers
whole), so every refusal and failure comes with its HTTP status. Until then the route watches
the connection: a client that closes it cancels its call's generation (``Gateway.answer``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from app.gateway import replies
from app.gateway.errors import GatewayError
from app.gateway.schemas import ChatRequest, CompletionRequest, OpenAIRequest
from app.gateway.service import Gateway, Reply, caller_of, chat_messages
from app.gateway.unserved import CHAT, COMPLETIONS, refuse_tool_calls, refuse_unserved
from graphs.policies.base import Message

router = APIRouter(prefix="/v1", tags=["openai"])


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


@router.get("/models", summary="The model names served: base, each role with an active adapter, each version")
async def models(request: Request) -> dict[str, Any]:
    names = await asyncio.to_thread(gateway_of(request).names.served)
    return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "sparring"}
                                       for n in names]}


@router.post("/chat/completions", summary="A chat completion, logged as a turn", response_model=None)
async def chat_completions(body: ChatRequest, request: Request) -> Response:
    refuse_unserved(body, CHAT)
    refuse_tool_calls(body.messages)
    reply = await _serve(request, body, chat_messages(body.messages))
    logprobs = bool(body.logprobs)
    if body.stream:
        events = replies.chat_events(reply, body.model, logprobs, _with_usage(body.stream_options))
        return StreamingResponse(events, media_type="text/event-stream")
    return JSONResponse(replies.chat_body(reply, body.model, logprobs))


@router.post("/completions", summary="A text completion (the prompt as one user message), logged as a turn",
             response_model=None)
async def completions(body: CompletionRequest, request: Request) -> Response:
    refuse_unserved(body, COMPLETIONS)
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if len(prompts) != 1:
        raise GatewayError(400, f"prompt: one prompt per request (each is a turn), got {len(prompts)}",
                           "unsupported_parameter", "prompt")
    reply = await _serve(request, body, [{"role": "user", "content": prompts[0]}])
    logprobs = body.logprobs is not None
    if body.stream:
        events = replies.completion_events(reply, body.model, logprobs, _with_usage(body.stream_options))
        return StreamingResponse(events, media_type="text/event-stream")
    return JSONResponse(replies.completion_body(reply, body.model, logprobs))


async def _serve(request: Request, body: OpenAIRequest, messages: list[Message]) -> Reply:
    gateway = gateway_of(request)
    call = await gateway.place(body, messages, caller_of(request.headers, body.metadata))
    return await gateway.answer(call, client_gone(request))


async def client_gone(request: Request) -> None:
    """Returns once the client has closed its connection. The body has been read, so the next
    message the server sends the app is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _with_usage(options: dict[str, Any] | None) -> bool:
    return bool((options or {}).get("include_usage"))
