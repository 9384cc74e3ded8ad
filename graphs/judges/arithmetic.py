"""Written arithmetic checked exactly: the steps "a op b (op c...) = d" of a solution, which of
them are wrong, a note naming each wrong one with its right result, and the solution with its
wrong results corrected.

A calculator's view: it checks each step's result against its own operands, never the setup (a
right sum of the wrong numbers passes). The scripted critic ``arithmetic-checker`` writes its
notes as its review; math-reflection puts them in the critic's review prompt and beside the
critic's review in the actor's refinement prompt (``ReflectionOptions.checker``), and teaches
the actor to use them with rows whose answer is the rejected one, corrected (``corrected``).

Expressions are evaluated by walking their syntax tree (+ - * / and parentheses only), never
with ``eval``: the text is model-written.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

_OPERAND = r"\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_STEP = re.compile(rf"(?<![\w.]){_OPERAND}(?:\s*[-+x×*/÷]\s*{_OPERAND})+\s*=\s*(-?{_OPERAND})")
"""A written step: numbers joined by + - x × * / ÷, "=", and its stated result ($ and thousands
separators allowed)."""
_NUMBER = re.compile(r"(?<![\d.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)")
"""A number as written in prose or a step (thousands separators allowed)."""
MAX_NOTED_STEPS = 3
"""Wrong steps a note names at most (the first ones)."""
MAX_CORRECTIONS = 8
"""Wrong steps ``corrected`` fixes at most before it gives up on a solution."""
_OPERATORS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def wrong_steps(text: str) -> list[tuple[str, str]]:
    """(step as written, its right result) for each step whose stated result is off by more than
    rounding to cents."""
    return [(" ".join(match.group(0).split()), right) for match, right in _wrong_matches(text)]


def checker_notes(text: str) -> str | None:
    """One sentence per wrong step (the first ``MAX_NOTED_STEPS``), e.g. "13 x 8 = 108 is wrong: it
    is 104."; None when every step it can check is right."""
    wrong = wrong_steps(text)
    if not wrong:
        return None
    return " ".join(f"{step} is wrong: it is {right}." for step, right in wrong[:MAX_NOTED_STEPS])


def corrected(text: str) -> str | None:
    """``text`` with each wrong step's result replaced by the right one, and every later mention of
    the wrong number too (a later step that used it is then recomputed in turn, as is the final
    answer line); None when no step is wrong, or when fixing goes on past ``MAX_CORRECTIONS`` steps.
    Whether the corrected solution is right is for a judge with the ground truth to say."""
    for corrections in range(MAX_CORRECTIONS + 1):
        first = next(iter(_wrong_matches(text)), None)
        if first is None:
            return text if corrections else None
        match, right = first
        wrong = plain_arithmetic(match.group(1))
        head, tail = text[: match.start(1)], text[match.start(1):]
        fixed = head + _NUMBER.sub(lambda n: right if plain_arithmetic(n.group(0)) == wrong else n.group(0), tail)
        if fixed == text:  # a result written in a form it cannot replace (a negative one)
            return None
        text = fixed
    return None


def plain_arithmetic(text: str) -> str:
    """Written arithmetic as ``evaluate`` reads it: no "$" or thousands separators, and "x", "×"
    and "÷" as "*" and "/"."""
    return text.replace("$", "").replace(",", "").replace("×", "*").replace("x", "*").replace("÷", "/")


def evaluate(expression: str) -> float | None:
    """Evaluate + - * / and parentheses only (never eval): None when it is not such an
    expression, divides by zero or overflows."""
    try:
        value = _walk(ast.parse(expression.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    return value if math.isfinite(value) else None


def format_number(value: float) -> str:
    """An integer without ".0", anything else to 6 significant digits."""
    return str(int(value)) if value.is_integer() else f"{value:.6g}"


def _wrong_matches(text: str) -> list[tuple[re.Match[str], str]]:
    wrong = []
    for match in _STEP.finditer(text):
        left = match.group(0).rpartition("=")[0]
        value, stated = evaluate(plain_arithmetic(left)), evaluate(plain_arithmetic(match.group(1)))
        if value is not None and stated is not None and abs(value - stated) > 0.005 + 1e-9 * abs(value):
            wrong.append((match, format_number(round(value, 6))))
    return wrong


def _walk(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_walk(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_walk(node.left), _walk(node.right))
    raise ValueError(f"not plain arithmetic: {ast.dump(node)[:60]}")
