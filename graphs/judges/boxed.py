"""The content of the last ``\\boxed{...}`` in a LaTeX text, with balanced braces."""

from __future__ import annotations

_BOXED = "\\boxed{"


def last_boxed(text: str) -> str | None:
    """Return what the last closed ``\\boxed{...}`` holds (``\\boxed{\\frac{1}{2}}`` gives
    ``\\frac{1}{2}``), or None when there is none. Linear in the text's length, however
    many boxes are left unclosed."""
    closing = _matching_braces(text)
    start = text.rfind(_BOXED)
    while start != -1:
        brace = start + len(_BOXED) - 1
        if brace in closing:
            return text[brace + 1 : closing[brace]]
        start = text.rfind(_BOXED, 0, start)
    return None


def _matching_braces(text: str) -> dict[int, int]:
    """Position of each "{" that closes -> position of its "}"."""
    closing: dict[int, int] = {}
    open_braces: list[int] = []
    for position, char in enumerate(text):
        if char == "{":
            open_braces.append(position)
        elif char == "}" and open_braces:
            closing[open_braces.pop()] = position
    return closing
