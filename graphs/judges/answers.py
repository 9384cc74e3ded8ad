"""Extract the final answer from a model's response.

The games ask for a closing line "Answer: <x>". Small models decorate it (``**Answer:** $1,000$.``,
``Answer: 12 apples``, ``Answer: 3 + 4 = 7``), so the value is cleaned before it is judged; a
response without such a line may still carry a ``\\boxed{}`` answer, and one with neither
is read for its last number (the "flexible extract" of GSM8K evaluations): a 135M model often
works the sum out ("18 + 9 = 27 pages.") and forgets the closing line.
"""

from __future__ import annotations

import re

from graphs.judges.boxed import last_boxed

_ANSWER = re.compile(r"answer\s*[*_]*\s*[:：]", re.IGNORECASE)
_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?"
_CURRENCY = r"(?:\\?[$€£])?\s*"
_WHOLE_NUMBER = re.compile(rf"{_CURRENCY}({_NUMBER})")
_NUMBER_THEN_WORDS = re.compile(rf"{_CURRENCY}({_NUMBER})\s+[A-Za-z][A-Za-z\s.,'-]*")
_SINGLE_LETTER = re.compile(r"\(?[A-Za-z]\)?")
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def extract_answer(text: str) -> str | None:
    """The final answer in ``text``: the value of the last "Answer:" line, else the last
    ``\\boxed{}``, else the last number; None when there is none of these.

    Numbers come back plain (``"$1,000."`` -> ``"1000"``); anything else comes back as
    cleaned LaTeX (``"$\\frac{1}{2}$"`` -> ``"\\frac{1}{2}"``) for ``graphs.judges.ground_truth`` to compare.
    """
    matches = list(_ANSWER.finditer(text))
    if matches:
        value = _clean(_value_after(text, matches[-1].end()))
        if value is not None:
            return value
    boxed = last_boxed(text)
    if boxed is not None:
        return _clean(boxed)
    numbers = _WHOLE_NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def _value_after(text: str, start: int) -> str:
    """The rest of the line after "Answer:", or the next non-empty line when it is empty."""
    rest = text[start:].lstrip(" \t*_")
    for line in rest.splitlines():
        if line.strip(" \t*_"):
            return line
    return ""


def _clean(value: str) -> str | None:
    value = _unwrap(value)
    boxed = last_boxed(value)
    if boxed is not None:
        value = _unwrap(boxed.strip())
    if "=" in value:  # "3 + 4 = 7": the value is what the equation ends with
        value = _unwrap(value.rsplit("=", 1)[1].strip())
    number = _WHOLE_NUMBER.fullmatch(value) or _NUMBER_THEN_WORDS.fullmatch(value)
    if number:
        return number.group(1).replace(",", "")
    if any(ch.isdigit() for ch in value) or "\\" in value or _SINGLE_LETTER.fullmatch(value):
        return value
    return None


def _unwrap(value: str) -> str:
    """Drop math delimiters and markdown around a value: ``$x$``, ``\\(x\\)``, ``**x**``."""
    while True:
        stripped = value.strip().strip("*_`").strip().rstrip(".").strip()
        for left, right in _MATH_DELIMITERS:
            if len(stripped) > len(left) + len(right) and stripped.startswith(left) and stripped.endswith(right):
                stripped = stripped[len(left) : len(stripped) - len(right)].strip()
                break
        if stripped == value:
            return value
        value = stripped
