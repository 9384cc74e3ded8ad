"""Stable seeds derived from an episode's seed and a position in it (a turn, a seat's draw)."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from the episode seed and the turn position."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF
