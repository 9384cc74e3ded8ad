"""The fixer's credit: half for the share of tests its fix passes, half for passing them all.

A fix that passes every test earns 1; one that passes four of five, 0.4 (below SFT's and KTO's
0.5: only complete fixes are good examples), yet more than one that passes none, which gives
policy-gradient rows a signal between the two. A fix that breaks a sandbox limit passed no
test that counts (its ``tests_passed`` is 0).
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.credit import CORRECT, CreditRule, CreditTurn

TESTS_PASSED = "tests_passed"
BUG_VALID = "bug_valid"
"""the breaker's reward: its code is a bug (compiles, runs within the limits, fails a test)"""


def fixer_credits(turns: Sequence[CreditTurn], role: str) -> dict[str, float]:
    return {t.turn_id: (t.rewards.get(CORRECT, 0.0) + t.rewards[TESTS_PASSED]) / 2
            for t in turns if t.selected and t.seat == role and TESTS_PASSED in t.rewards}


FIXER_CREDIT = CreditRule(fixer_credits)
