"""The errors of the Python API: each message says what to change."""

from __future__ import annotations


class SparringError(Exception):
    """Anything the API refuses or could not do."""


class InputError(SparringError, ValueError):
    """Bad input, or a setup the call cannot run with (a store it cannot write, an unknown game,
    a seat spec the registry lacks): nothing was played or written."""


class RunError(SparringError, RuntimeError):
    """Work that started and could not go on (models that failed to load, workers that could not
    start); what finished is kept in the store."""


def one_line(exc: BaseException, limit: int = 600) -> str:
    """An error's message on one line and at most ``limit`` characters: a library's own (a
    tensor size mismatch, a server's reply) can run to thousands of lines. Keys and passwords are masked."""
    from storage.redact import redact

    text = redact(" ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
