"""Finding the code in a model's answer."""

from __future__ import annotations

import re

_FENCED = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_CODE_START = re.compile(r"^(?:def |class |import |from \w)", re.MULTILINE)


def extract_code(text: str) -> str | None:
    """The code of an answer: its first fenced block that defines something (else its first
    fenced block; a block the answer did not close runs to the end), or, without a fence, the
    text from the first line that starts a definition or an import. None when there is none."""
    blocks = [block.strip("\n") for block in _FENCED.findall(text) if block.strip()]
    if blocks:
        chosen = next((b for b in blocks if "def " in b or "class " in b), blocks[0])
        return chosen + "\n"
    start = _CODE_START.search(text)
    return text[start.start():].rstrip() + "\n" if start else None
