"""Keys and passwords taken out of error text before it is stored or printed.

An upstream server may echo the request's API key in its error body, a driver may print a
database URL with its password: ``redact`` replaces what looks like a secret with ``****``:

- every value registered with ``register_secret`` (the configured OpenAI API key: the
  settings and each OpenAI-compatible backend register theirs), wherever it appears;
- ``sk-...`` tokens (OpenAI-style keys) and ``Bearer ...`` credentials;
- the password of a URL (``scheme://user:****@host``, with any number of slashes after the
  scheme, up to the host's ``@``);
- the value after ``api_key``, ``access_token``, ``password``, ``secret`` and alike
  (``api_key=...``, ``"password": "..."``).

It is meant for error messages and tracebacks, never for model text.
"""

from __future__ import annotations

import re
import threading

MASK = "****"
MIN_SECRET_CHARS = 8
"""Shorter values are not registered: masking a word as common as a short password would
garble unrelated text."""

_PATTERNS = (
    (re.compile(r"\bsk-[A-Za-z0-9][A-Za-z0-9_\-]{7,}"), "sk-" + MASK),
    (re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=\-]+", re.IGNORECASE), r"\1" + MASK),
    (re.compile(r"\b([a-z][a-z0-9+.\-]*:/{0,3}[^\s:/@]*:)[^\s/]+@", re.IGNORECASE), r"\1" + MASK + "@"),
    (
        re.compile(
            r"""((?<![A-Za-z0-9])(?:api[_-]?key|access[_-]?token|auth[_-]?token|password|passwd|secret)"""
            r"""["']?\s*[:=]\s*["']?)[^\s"'&,;}]+""",
            re.IGNORECASE,
        ),
        r"\1" + MASK,
    ),
)
_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Mask ``value`` in every later ``redact`` of this process (short or empty values are ignored)."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with registered secrets, keys, bearer tokens and URL passwords replaced by ``****``."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)  # a longer secret first when one holds another
    for secret in secrets:
        text = text.replace(secret, MASK)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
