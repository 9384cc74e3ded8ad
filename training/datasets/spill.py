"""Rows parked on disk until a builder's ``finish``: two-pass builders (advantages need their
group's statistics, balancing needs every count) keep only small keys in memory, not the
rows with their messages and token ids."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from typing import Any


class Spill:
    """An anonymous temporary file of JSON rows, appended in order and read back by index or
    in order. The file disappears when closed (or garbage-collected)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()
        self._offsets: list[int] = []

    def append(self, row: dict[str, Any]) -> int:
        """Park ``row``; returns its index."""
        return self.append_encoded(json.dumps(row, ensure_ascii=False).encode())

    def append_encoded(self, line: bytes) -> int:
        """Park a row already encoded as one line of JSON; returns its index."""
        self._offsets.append(self._file.tell())
        self._file.write(line + b"\n")
        return len(self._offsets) - 1

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._file.seek(0)
        for line in self._file:
            yield json.loads(line)
        self._file.seek(0, 2)  # appends go to the end again

    def lines(self) -> Iterator[bytes]:
        """The parked rows in order, as the JSON text they were written as (no newline)."""
        self._file.seek(0)
        for line in self._file:
            yield line.rstrip(b"\n")
        self._file.seek(0, 2)

    def get(self, index: int) -> dict[str, Any]:
        end = self._file.tell()
        self._file.seek(self._offsets[index])
        row = json.loads(self._file.readline())
        self._file.seek(end)
        return row

    def close(self) -> None:
        self._file.close()
