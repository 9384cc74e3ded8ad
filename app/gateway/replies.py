"""OpenAI's response bodies for one logged call, whole or as server-sent events.

Besides OpenAI's fields, every answer carries what training needs, the way vLLM returns it with
``return_token_ids``: ``prompt_token_ids`` (top level) and ``token_ids`` (on the choice), the
generated ids including any that made a stop string; and ``sparring``: the episode, turn, seat
and the adapter that served the call. ``logprobs`` (when asked) are those the backend logged:
each sampled token's log-probability under the model before temperature; there are no
alternatives (``top_logprobs`` is empty). A token's text is the tokenizer's decoding of that one
id; a backend without a local tokenizer (vLLM upstream) names it ``token_id:N``, as vLLM's
``return_tokens_as_token_ids`` does.

The in-process backend answers a request whole, so a stream carries the reply in one content
chunk, then the finish reason, then (``stream_options.include_usage``) the usage.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from app.gateway.service import Reply


def token_texts(reply: Reply) -> list[str]:
    tokenizer = getattr(reply.policy.backend, "tokenizer", None)
    ids = reply.result.completion_token_ids
    if tokenizer is None:
        return [f"token_id:{i}" for i in ids]
    return [tokenizer.decode([i]) for i in ids]


def chat_logprobs(reply: Reply) -> dict[str, Any]:
    return {"content": [{"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []}
                        for text, logprob in zip(token_texts(reply), reply.result.logprobs, strict=True)],
            "refusal": None}


def completion_logprobs(reply: Reply) -> dict[str, Any]:
    texts = token_texts(reply)
    offsets = [sum(len(t) for t in texts[:i]) for i in range(len(texts))]
    return {"tokens": texts, "token_logprobs": reply.result.logprobs, "top_logprobs": None, "text_offset": offsets}


def _head(reply: Reply, kind: str, model: str) -> dict[str, Any]:
    turn = reply.turn
    prefix = "chatcmpl" if kind.startswith("chat") else "cmpl"
    return {"id": f"{prefix}-{turn.id}", "object": kind, "created": int(time.time()), "model": model}


def _extras(reply: Reply) -> dict[str, Any]:
    turn = reply.turn
    return {"prompt_token_ids": reply.result.prompt_token_ids,
            "sparring": {"episode_id": turn.episode_id, "turn_id": turn.id, "seat": turn.seat,
                         "served_by": turn.served_by}}


def usage(reply: Reply) -> dict[str, int]:
    prompt, completion = len(reply.result.prompt_token_ids), len(reply.result.completion_token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_body(reply: Reply, model: str, logprobs: bool) -> dict[str, Any]:
    result = reply.result
    choice = {"index": 0, "message": {"role": "assistant", "content": result.text},
              "logprobs": chat_logprobs(reply) if logprobs else None, "finish_reason": result.finish_reason,
              "token_ids": result.completion_token_ids}
    return {**_head(reply, "chat.completion", model), "choices": [choice], "usage": usage(reply), **_extras(reply)}


def completion_body(reply: Reply, model: str, logprobs: bool) -> dict[str, Any]:
    result = reply.result
    choice = {"index": 0, "text": result.text, "logprobs": completion_logprobs(reply) if logprobs else None,
              "finish_reason": result.finish_reason, "token_ids": result.completion_token_ids}
    return {**_head(reply, "text_completion", model), "choices": [choice], "usage": usage(reply), **_extras(reply)}


def chat_events(reply: Reply, model: str, logprobs: bool, with_usage: bool) -> Iterator[str]:
    head = _head(reply, "chat.completion.chunk", model)
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    content = {"index": 0, "delta": {"content": reply.result.text},
               "logprobs": chat_logprobs(reply) if logprobs else None, "finish_reason": None,
               "token_ids": reply.result.completion_token_ids}
    last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reply.result.finish_reason}
    yield _event({**head, "choices": [first], **_extras(reply)})
    yield _event({**head, "choices": [content]})
    yield _event({**head, "choices": [last]})
    yield from _tail(head, reply, with_usage)


def completion_events(reply: Reply, model: str, logprobs: bool, with_usage: bool) -> Iterator[str]:
    head = _head(reply, "text_completion", model)
    content = {"index": 0, "text": reply.result.text, "logprobs": completion_logprobs(reply) if logprobs else None,
               "finish_reason": None, "token_ids": reply.result.completion_token_ids}
    last = {"index": 0, "text": "", "logprobs": None, "finish_reason": reply.result.finish_reason}
    yield _event({**head, "choices": [content], **_extras(reply)})
    yield _event({**head, "choices": [last]})
    yield from _tail(head, reply, with_usage)


def _tail(head: dict[str, Any], reply: Reply, with_usage: bool) -> Iterator[str]:
    if with_usage:
        yield _event({**head, "choices": [], "usage": usage(reply)})
    yield "data: [DONE]\n\n"


def _event(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body)}\n\n"
