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
