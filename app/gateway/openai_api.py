"""The OpenAI-compatible routes: /v1/models, /v1/chat/completions and /v1/completions.

The backends serve chat conversations, so /v1/completions takes its prompt as one user message
(the model's chat template applies): it is there for clients that only speak the legacy API,
not for raw continuation.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.responses import Response

from app.gateway import replies
from app.gateway.errors import GatewayError
from app.gateway.schemas import ChatRequest, CompletionRequest
from app.gateway.service import Gateway, caller_of, chat_messages

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
    if body.tools:
        raise GatewayError(400, "tools: the gateway serves plain chat (no tool calls); describe the tools in the "
                           "prompt instead", "unsupported_parameter", "tools")
    if body.top_logprobs:
        raise GatewayError(400, "top_logprobs: the backends log the sampled token's logprob only; ask logprobs=true "
                           "without top_logprobs", "unsupported_parameter", "top_logprobs")
    gateway = gateway_of(request)
    sampling = gateway.sampling_of(body, body.max_completion_tokens or body.max_tokens)
    reply = await gateway.call(body.model, chat_messages(body.messages), sampling,
                               caller_of(request.headers, body.metadata))
    if body.stream:
        events = replies.chat_events(reply, body.model, body.logprobs, _with_usage(body.stream_options))
        return StreamingResponse(events, media_type="text/event-stream")
    return JSONResponse(replies.chat_body(reply, body.model, body.logprobs))


@router.post("/completions", summary="A text completion (the prompt as one user message), logged as a turn",
             response_model=None)
async def completions(body: CompletionRequest, request: Request) -> Response:
    if body.echo:
        raise GatewayError(400, "echo: the gateway does not echo prompts", "unsupported_parameter", "echo")
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if len(prompts) != 1:
        raise GatewayError(400, f"prompt: one prompt per request (each is a turn), got {len(prompts)}",
                           "unsupported_parameter", "prompt")
    gateway = gateway_of(request)
    sampling = gateway.sampling_of(body, body.max_tokens)
    reply = await gateway.call(body.model, [{"role": "user", "content": prompts[0]}], sampling,
                               caller_of(request.headers, body.metadata))
    logprobs = body.logprobs is not None
    if body.stream:
        events = replies.completion_events(reply, body.model, logprobs, _with_usage(body.stream_options))
        return StreamingResponse(events, media_type="text/event-stream")
    return JSONResponse(replies.completion_body(reply, body.model, logprobs))


def _with_usage(options: dict[str, Any] | None) -> bool:
    return bool((options or {}).get("include_usage"))
