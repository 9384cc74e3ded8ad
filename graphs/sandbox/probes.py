"""What of a test goes into a sandboxed run, and what stays outside with the trusted side.

A test ``assert X == Y`` whose ``Y`` is a literal (or ``assert X is None/True/False``) is a
**value** probe: only ``X`` enters the run, which sends back its value as plain data
(``graphs.sandbox.plain``); ``Y`` never enters it, and the trusted side compares. Any other test
(a test function, an assert of another shape) is a **trace** probe: it runs whole, and every
call it makes to a function of the code is recorded (its result and its arguments afterwards,
as plain data). A trace test passes when the code's trace equals the trace of the reference
solution on the same test (the task's reference, run apart), so the verdict again rests on
values compared outside, never on what the run says of itself (so a test function whose calls
give other values from run to run, through unseeded randomness or the clock, fails). Without
a reference a trace test is judged from the run's own account, and its check says it is not
trusted.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Probe:
    kind: Literal["value", "trace"]
    source: str
    """what enters the run: the expression X of a value probe, the whole test of a trace probe"""
    expected: Any = None
    """a value probe's expected value (it stays outside)"""
    identity: bool = False
    """compare with ``is`` (None, True, False) rather than ``==``"""

    def job(self) -> dict[str, str]:
        return {"kind": self.kind, "source": self.source}


def probe(test: str) -> Probe:
    """The probe of one test (its source must parse; a task loader checks that)."""
    body = ast.parse(test).body
    if len(body) == 1 and isinstance(body[0], ast.Assert) and body[0].msg is None:
        compare = body[0].test
        if isinstance(compare, ast.Compare) and len(compare.ops) == 1:
            op, right = compare.ops[0], compare.comparators[0]
            if isinstance(op, ast.Eq):
                try:
                    expected = ast.literal_eval(right)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    return Probe("trace", test)
                return Probe("value", ast.unparse(compare.left), expected)
            if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and any(
                    right.value is c for c in (None, True, False)):
                return Probe("value", ast.unparse(compare.left), right.value, identity=True)
    return Probe("trace", test)
