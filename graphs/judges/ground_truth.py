"""Is a predicted final answer equal to the ground truth?

Plain numbers are compared as numbers ("1,000" == "1000", "12.0" == "12"). Everything else
goes to math-verify, which compares LaTeX expressions symbolically ("\\frac{1}{2}" == "0.5").

math-verify's own timeouts use ``signal.alarm``, which fails outside the main thread, so they
are turned off here. That leaves one way to hang: an answer whose value is astronomically large
(``9^{9^{9}}``) makes sympy compute it while holding the GIL, freezing every thread. Such
answers are refused before comparison (judged incorrect): a model being trained against this
check must not be able to stop training by writing a power tower.
"""

from __future__ import annotations

import logging
import re
from decimal import Decimal, InvalidOperation

import sympy
from math_verify import parse, verify

# With its timeouts off, math-verify warns once per process that the caller must guard against
# hangs; the guard is MAX_EXPONENT below, so the warning would only alarm users of `play`.
for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).setLevel(logging.ERROR)

MAX_EXPONENT = 10_000
"""Largest numeric exponent (and factorial argument) this check agrees to evaluate."""

_PLAIN_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


def is_correct(pred: str | None, gold: str) -> bool:
    """True when ``pred`` is the same answer as ``gold``; never raises, None is incorrect."""
    if pred is None or not pred.strip():
        return False
    pred_number, gold_number = _plain_number(pred), _plain_number(gold)
    if pred_number is not None and gold_number is not None:
        return pred_number == gold_number
    try:
        gold_parsed, pred_parsed = _parse(gold), _parse(pred)
        if not gold_parsed or not pred_parsed or not (_safe(gold_parsed) and _safe(pred_parsed)):
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))
    except Exception:  # math-verify and sympy raise many kinds on odd input: that is "no match"
        return False


def _plain_number(text: str) -> Decimal | None:
    text = text.strip().removeprefix("\\$").removeprefix("$").removesuffix("$").strip().rstrip(".")
    if not _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None


def _parse(text: str) -> list[object]:
    """math-verify's parse, with a bare expression wrapped in ``$...$`` so that LaTeX such as
    ``\\frac12`` is found (unwrapped, its LaTeX extractor misses about one MATH answer in ten)."""
    text = text.replace("\\$", "")
    if "$" not in text and "\\(" not in text and "\\[" not in text:
        text = f"${text}$"
    return parse(text, parsing_timeout=None)


def _safe(parsed: list[object]) -> bool:
    """Whether every expression in ``parsed`` can be evaluated without astronomically large
    numbers: each numeric exponent and factorial argument stays within MAX_EXPONENT."""
    for item in parsed:
        if isinstance(item, sympy.MatrixBase):
            if not all(_safe_expr(element) for element in item):
                return False
        elif isinstance(item, sympy.Basic) and not _safe_expr(item):
            return False
    return True


def _safe_expr(expr: sympy.Basic) -> bool:
    """Checked bottom-up, so an exponent is only evaluated once it is known to be safe."""
    if not all(_safe_expr(arg) for arg in expr.args if isinstance(arg, sympy.Basic)):
        return False
    if isinstance(expr, sympy.Pow):
        return _bounded(expr.exp)
    if isinstance(expr, sympy.factorial):
        return _bounded(expr.args[0])
    return True


def _bounded(value: sympy.Basic) -> bool:
    if value.free_symbols:
        return True
    magnitude = sympy.Abs(value).evalf(15)
    return bool(magnitude.is_real) and bool(magnitude <= MAX_EXPONENT)
