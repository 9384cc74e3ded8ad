"""Seeded single-site mutations of Python code: the bugs of code-debug.

A mutation changes one place of the code in the way programmers slip: a comparison off by one
(``<`` for ``<=``), the other arithmetic or boolean operator, an integer one too big or too
small, ``min`` for ``max``, ``True`` for ``False``. Every kind is its own inverse (or comes
with it), so each bug can be undone by another mutation: the ``mutation-undo`` bot fixes code
by trying one.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator
from dataclasses import dataclass

_SWAPS: dict[type, tuple[type, ...]] = {
    ast.Lt: (ast.LtE,), ast.LtE: (ast.Lt,), ast.Gt: (ast.GtE,), ast.GtE: (ast.Gt,),
    ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,),
    ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.FloorDiv,), ast.Div: (ast.FloorDiv,),
    ast.FloorDiv: (ast.Mult, ast.Div, ast.Mod), ast.Mod: (ast.FloorDiv,),
    ast.And: (ast.Or,), ast.Or: (ast.And,),
}
_SYMBOLS = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
    ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.Add: "+", ast.Sub: "-", ast.Mult: "*",
    ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.And: "and", ast.Or: "or",
}
_NAMES = {"min": "max", "max": "min"}


@dataclass(frozen=True)
class Mutation:
    code: str
    """the mutated code (``ast.unparse`` form: compare it with ``normalise``d code)"""
    description: str
    """what changed and where, e.g. "'<=' became '<' on line 3\""""
    kind: str
    """comparison, arithmetic, boolean, constant or call"""


def normalise(code: str) -> str:
    """The code as ``ast.unparse`` writes it (no comments): the form mutations are made in, so
    a bug and its reference differ only where the bug is."""
    return ast.unparse(ast.parse(code)) + "\n"


def mutations(code: str) -> list[Mutation]:
    """Every single-site mutation of the code, in a fixed order."""
    found = []
    for index, (node, field, _, replacement, what) in enumerate(_sites(ast.parse(code))):
        mutated = ast.parse(code)
        target, _, position, _, _ = list(_sites(mutated))[index]
        _apply(target, field, position, replacement)
        found.append(Mutation(ast.unparse(mutated) + "\n", f"{what} on line {node.lineno}", _kind(node, field)))
    return found


def mutate(code: str, seed: int) -> Mutation | None:
    """One mutation chosen by ``seed``; None when the code has no place to mutate."""
    options = mutations(code)
    return random.Random(seed).choice(options) if options else None


_Site = tuple[ast.AST, str, int | None, object, str]
"""(node, field, position in a list field or None, the replacement, what changes)"""


def _sites(tree: ast.AST) -> Iterator[_Site]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                for alternative in _SWAPS.get(type(op), ()):
                    yield node, "ops", i, alternative, _changed(type(op), alternative)
        elif isinstance(node, ast.BinOp | ast.AugAssign | ast.BoolOp):
            for alternative in _SWAPS.get(type(node.op), ()):
                yield node, "op", None, alternative, _changed(type(node.op), alternative)
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            for value in (node.value + 1, node.value - 1):
                if value >= 0:  # -1 would be written as -(1), which no mutation turns back into 0
                    yield node, "value", None, value, f"{node.value} became {value}"
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            yield node, "value", None, not node.value, f"{node.value} became {not node.value}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _NAMES:
            yield node.func, "id", None, _NAMES[node.func.id], f"{node.func.id}() became {_NAMES[node.func.id]}()"


def _apply(node: ast.AST, field: str, position: int | None, replacement: object) -> None:
    if isinstance(replacement, type):
        replacement = replacement()
    if position is None:
        setattr(node, field, replacement)
    else:
        getattr(node, field)[position] = replacement


def _kind(node: ast.AST, field: str) -> str:
    if isinstance(node, ast.Compare):
        return "comparison"
    if isinstance(node, ast.BoolOp):
        return "boolean"
    if isinstance(node, ast.BinOp | ast.AugAssign):
        return "arithmetic"
    return "call" if field == "id" else "constant"


def _changed(before: type, after: type) -> str:
    return f"'{_SYMBOLS[before]}' became '{_SYMBOLS[after]}'"
