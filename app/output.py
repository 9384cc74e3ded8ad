"""Render rows as a table that fits the console (for people) or JSON / JSON lines (for programs).

A table never wraps a row over several lines to fit: when its natural width is more than the
console's (80 columns when output is not a terminal), a column whose cells are all alike moves
to the caption, free text wraps at words, long paths and URLs fold, and the columns that still
do not fit are left out, named in the caption (``--format json`` keeps every key). Long hex ids
are shortened in tables (every command taking an id accepts a unique prefix).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

ID_CHARS = 8
"""hex ids are shown by their first 8 characters in tables"""
TEXT_MIN = 24
"""free text wraps to no fewer columns than this"""
FOLD_MIN = 24
"""a column of paths or URLs wider than this may fold down to it"""
GAP = 2
"""columns between two table columns"""

_HEX_ID = re.compile(r"^[0-9a-f]{9,}$")


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


def number(value: float) -> str:
    """A float for people: 5220 and 82.8, not 5.22e+03 (only tiny values keep an exponent: 1e-05)."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) < 1e-3:
        return f"{value:.2g}"
    return f"{value:.3g}"


def _is_id_column(name: str) -> bool:
    return name == "id" or name.endswith("_id") or name == "run"


def cell(value: Any, column: str = "") -> str:
    """How a table shows one value."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return number(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, (dict, list)):
        return dumps(value)
    text = str(value)
    if _is_id_column(column) and _HEX_ID.match(text):
        return text[:ID_CHARS]
    return text


@dataclass
class _Column:
    name: str
    cells: list[str]

    @property
    def natural(self) -> int:
        return max([len(self.name), *(len(line) for c in self.cells for line in c.splitlines() or [""])])

    @property
    def text(self) -> bool:
        """free text (wraps at words) rather than one token each (an id, a number, a path)"""
        return any(" " in c for c in self.cells)

    @property
    def minimum(self) -> int:
        if self.text:
            return max(len(self.name), min(self.natural, TEXT_MIN))
        if self.natural > FOLD_MIN and any("/" in c for c in self.cells):  # paths and URLs fold; names do not
            return max(len(self.name), FOLD_MIN)
        return self.natural


def _width(columns: Sequence[_Column], widths: Sequence[int]) -> int:
    return sum(widths) + GAP * max(0, len(columns) - 1)


def fit(columns: list[_Column], width: int) -> tuple[list[_Column], list[int], list[str]]:
    """The columns shown, their widths and caption notes, for a table at most ``width`` wide."""
    notes: list[str] = []
    if len(columns[0].cells) > 1:  # empty columns first, then the widest
        alike = sorted((c for c in columns if len(set(c.cells)) == 1), key=lambda c: (c.cells[0] != "-", -c.natural))
        for column in alike:
            if len(columns) == 1 or _width(columns, [c.natural for c in columns]) <= width:
                break
            notes.append(f"{column.name}: {column.cells[0]}")
            columns = [c for c in columns if c is not column]
    hidden: list[str] = []
    while len(columns) > 1 and _width(columns, [c.minimum for c in columns]) > width:
        hidden.insert(0, columns.pop().name)
    widths = [c.natural for c in columns]
    if _width(columns, widths) > width:
        widths = [c.minimum for c in columns]
        spare = width - _width(columns, widths)
        # give the room left to free text first, then to folded paths, each up to its natural width
        for wanted_text in (True, False):
            for i, column in enumerate(columns):
                if column.text == wanted_text and spare > 0:
                    grow = min(spare, column.natural - widths[i])
                    widths[i] += grow
                    spare -= grow
    if hidden:
        notes.append(f"not shown: {', '.join(hidden)} (--format json has every column)")
    return columns, widths, notes


def emit(
    rows: Sequence[Mapping[str, Any]],
    fmt: Format,
    *,
    columns: Sequence[str] | None = None,
    title: str | None = None,
    caption: str | None = None,
    console: Console | None = None,
) -> None:
    """Print rows; ``columns`` picks and orders the table's columns, the first ones mattering
    most when some must be left out (json keeps every key)."""
    if fmt == Format.json:
        sys.stdout.write(dumps(list(rows)) + "\n")
        return
    if fmt == Format.jsonl:
        for row in rows:
            sys.stdout.write(dumps(row) + "\n")
        return
    console = console or Console()
    names = list(columns or (rows[0].keys() if rows else []))
    planned = [_Column(name, [cell(row.get(name), name) for row in rows]) for name in names]
    shown, widths, notes = fit(planned, console.width) if planned else ([], [], [])
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
        header_style="bold",
    )
    for column, width in zip(shown, widths, strict=True):
        table.add_column(column.name, width=width, no_wrap=not column.text and width >= column.natural,
                         overflow="fold")
    for i in range(len(rows)):
        table.add_row(*(Text(column.cells[i]) for column in shown))  # data, never markup
    console.print(table, highlight=False)
    for line in [*([caption] if caption else []), *notes]:  # below the table: a caption would wrap to its width
        console.print(Text(line, style="dim"))
