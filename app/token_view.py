"""Decoded tokens of logged turns, aligned with their logprobs (`sparring episodes show --tokens`).

A scripted bot's token ids are the UTF-8 bytes of its text; a model turn's ids are its
tokenizer's, read from the configured model (the bundled one's tokenizer comes from its GGUF
file without loading the weights). An OpenAI-compatible API that is not vLLM logs no ids.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Decode = Callable[[int], str]


def _byte(token_id: int) -> str:
    return bytes([token_id]).decode("utf-8", errors="replace") if 0 <= token_id < 256 else "?"


def model_decoder(model: str, cache_dir: Path) -> Decode:
    """Decodes one token id of ``model`` (the ``model`` setting) to its text."""
    from transformers import AutoTokenizer

    from graphs.policies.base_models import BUNDLED, bundled_gguf_path, resolve_model

    if model == BUNDLED:
        gguf = bundled_gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    else:
        tokenizer = AutoTokenizer.from_pretrained(resolve_model(model, cache_dir))
    return lambda token_id: tokenizer.decode([token_id])


def aligned_tokens(turn: dict[str, Any], model: Callable[[], Decode]) -> list[dict[str, Any]]:
    """One ``{"id", "text", "logprob"}`` per completion token of ``turn`` (a turn as
    ``storage.queries.get_episode`` gives it); ``logprob`` is None where none was logged.
    ``model`` gives the model's decoder, asked for only when a model turn has ids."""
    ids = turn.get("completion_token_ids") or []
    if not ids:
        return []
    decode = _byte if turn["backend"] == "scripted" else model()
    logprobs = turn.get("logprobs") or []
    return [
        {"id": token_id, "text": decode(token_id), "logprob": logprobs[i] if i < len(logprobs) else None}
        for i, token_id in enumerate(ids)
    ]
