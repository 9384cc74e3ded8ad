"""How `--help` is laid out: nothing cut at any width, long help under its option.

Typer's rich panels give option help a column of what is left after the option's names and
value (17 characters at 80 columns) and cut names and values that do not fit with "…". sparring
uses click's plain help instead (``rich_markup_mode=None``) with this formatter: an option whose
names are short keeps its help beside it, otherwise the help wraps under it, indented; a
paragraph of list items (``* ...``) or of indented lines keeps its lines, an item's own
continuation lines joined to it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import typer
from typer.core import TyperGroup

SIDE_BY_SIDE = 24
"""a definition list whose terms are all at most this wide keeps each help beside its term"""
HELP_INDENT = 6
"""columns a help text is indented under its term (from the section's own indent)"""
_BULLETS = ("* ", "- ")
_LIST_STARTS = (*_BULLETS, "$ ", "  ")


def wrap(text: str, width: int) -> list[str]:
    """``text`` wrapped to ``width`` columns: paragraphs (split at blank lines) are refilled, but
    a paragraph of list items or indented lines keeps each line (an item with the lines that
    continue it), wrapped under its own start."""
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        rows = paragraph.strip("\n").splitlines()
        if not rows:
            continue
        if lines:
            lines.append("")
        if rows[0].strip() == "\b":  # click's marker: keep the paragraph as written
            lines.extend(rows[1:])
        elif any(row.startswith(_LIST_STARTS) for row in rows):
            for row in _items(rows):
                hang = " " * (len(row) - len(row.lstrip()) + (2 if row.lstrip().startswith(_LIST_STARTS) else 0))
                lines.extend(textwrap.wrap(row, width, subsequent_indent=hang, break_on_hyphens=False) or [""])
        else:
            lines.extend(textwrap.wrap(" ".join(paragraph.split()), width, break_on_hyphens=False))
    return lines


def _items(rows: list[str]) -> list[str]:
    """The rows of a list paragraph with each bullet's continuation lines (indented under its
    text) joined to it, so that an item is refilled as one text rather than broken where the
    source broke it."""
    items: list[str] = []
    hang: int | None = None  # the column an item's text starts at, while the row before is in an item
    for row in rows:
        text = row.lstrip()
        indent = len(row) - len(text)
        if hang is not None and indent >= hang and not text.startswith(_BULLETS + ("$ ",)):
            items[-1] = f"{items[-1]} {text}"
            continue
        items.append(row)
        hang = indent + 2 if text.startswith(_BULLETS) else None
    return items


class WrappingFormatter(typer.Context.formatter_class):  # click's HelpFormatter, as typer exposes it
    """click's help formatter, with help under a long term rather than in a narrow column."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        for line in wrap(text, max(self.width - self.current_indent, 20)):
            self.write(f"{indent}{line}\n" if line else "\n")

    def write_dl(self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        side_by_side = all(len(term) <= SIDE_BY_SIDE for term, _ in rows)
        column = max((len(term) for term, _ in rows), default=0) + col_spacing if side_by_side else HELP_INDENT
        indent = " " * (self.current_indent + column)
        for term, text in rows:
            lines = wrap(text, max(self.width - len(indent), 20))
            if side_by_side and lines:
                self.write(f"{' ' * self.current_indent}{term:<{column}}{lines.pop(0)}\n")
            else:
                self.write(f"{' ' * self.current_indent}{term}\n")
            for line in lines:
                self.write(f"{indent}{line}\n" if line else "\n")


class HelpContext(typer.Context):
    formatter_class = WrappingFormatter


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph, whole (a command list shows it)."""
    paragraph = " ".join(text.split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def use_wrapping_help(command: object) -> None:
    """Give ``command`` and every command under it the wrapping help formatter, and a short
    help that is its help's whole first sentence (click would cut it at 45 characters with "...")."""
    command.context_class = HelpContext  # type: ignore[attr-defined]
    if getattr(command, "help", None) and not getattr(command, "short_help", None):
        command.short_help = first_sentence(command.help)  # type: ignore[attr-defined]
    for child in getattr(command, "commands", {}).values():
        use_wrapping_help(child)


class SparringGroup(TyperGroup):
    """The root command group: every command under it formats its help with WrappingFormatter
    (sub-groups come from other modules' Typer apps, so the formatter is set on the built tree)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        use_wrapping_help(self)

