"""storage.redact: what looks like a key or password is masked in error text, other text is kept."""

from __future__ import annotations

import pytest

from storage.redact import redact, register_secret


@pytest.mark.parametrize(("text", "expected"), [
    ("Incorrect API key provided: sk-proj-abc123DEF456ghi.", "Incorrect API key provided: sk-****."),
    ("Authorization: Bearer eyJhbGciOi.J9x-y_z", "Authorization: Bearer ****"),
    ("could not connect to postgresql+psycopg://app:s3cr%40t@db:5432/x", "could not connect to "
     "postgresql+psycopg://app:****@db:5432/x"),
    ('{"api_key": "abc", "password": "pw1", "apiKey=xyz&x=1"}', '{"api_key": "****", "password": "****", '
     '"apiKey=****&x=1"}'),
    # what is no secret stays as it was
    ("HTTP 400: max_tokens=160 is too large; see http://127.0.0.1:8000/v1/models", None),
    ('password authentication failed for user "postgres"', None),
    ("task-0123456789 at actor turn 1: risk-free", None),
])
def test_patterns(text: str, expected: str | None) -> None:
    assert redact(text) == (text if expected is None else expected)


def test_registered_values_are_masked_wherever_they_appear_and_short_ones_are_not_registered() -> None:
    register_secret("plain-value-of-a-key-42")
    register_secret("short")
    assert redact("echo: plain-value-of-a-key-42/plain-value-of-a-key-42, short") == "echo: ****/****, short"
