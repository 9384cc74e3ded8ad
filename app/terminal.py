"""Text that came from a task or a model, made safe to print on a terminal: shown literally.

Rich reads ``[bold]`` in a string as markup, and a terminal runs the escape sequences it is
sent (ESC and C1 controls can move the cursor, rewrite the screen or set the window title);
a lone surrogate (half of a UTF-16 pair, which JSON can encode) cannot be written as UTF-8 at
all. ``printable`` writes each such character as its Python escape (``\\x1b``, ``\\x9b``,
``\\udc80``), as it does the controls that reorder text (U+202A-U+202E, U+2066-U+2069);
newlines and tabs stay. ``literal`` wraps the result in a ``rich.text.Text``, which Rich
never reads as markup.
"""

from __future__ import annotations

import re

from rich.text import Text

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str) -> str:
    """``text`` with control characters, text-reordering controls and lone surrogates escaped."""
    return _UNSAFE.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def literal(text: object, style: str = "") -> Text:
    """A Text showing ``text`` as it is (never markup), unsafe characters escaped."""
    return Text(printable("" if text is None else str(text)), style=style)
