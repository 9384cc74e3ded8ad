"""Render rows as a rich table (for people) or JSON / JSON lines (for programs)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table


class Format(StrEnum):
    table = "table"
    json = "json"
    jsonl = "jsonl"


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def dumps(value: Any) -> str:
    return json.dumps(value, default=_default, ensure_ascii=False)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, (dict, list)):
        return dumps(value)
    return str(value)


def emit(
    rows: Sequence[Mapping[str, Any]],
    fmt: Format,
    *,
    columns: Sequence[str] | None = None,
    title: str | None = None,
    caption: str | None = None,
    console: Console | None = None,
) -> None:
    """Print rows; ``columns`` picks and orders the table's columns (json keeps every key)."""
    if fmt == Format.json:
        sys.stdout.write(dumps(list(rows)) + "\n")
        return
    if fmt == Format.jsonl:
        for row in rows:
            sys.stdout.write(dumps(row) + "\n")
        return
    console = console or Console()
    columns = list(columns or (rows[0].keys() if rows else []))
    table = Table(title=title, caption=caption)
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    console.print(table)
