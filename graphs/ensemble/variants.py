"""The instruction variants an ensemble's agents answer under, and how options name them.

Each variant is a different instruction after the same question; all of them end with the
same answer line, so every answer is read and checked the same way. Accuracy on the bundled
model moves several-fold with the instruction alone (FACTS.md), which is what makes the
variants worth comparing and voting over. Instructions hold no digits: a scripted calculator
reads the last arithmetic in the prompt, which must be the question's.
"""

from __future__ import annotations

ANSWER_FORMAT = "Give the final answer as 'Answer: <number>'."

VARIANTS: dict[str, str] = {
    "plain": ANSWER_FORMAT,
    "step-by-step": f"Think step by step: write each step of the calculation on its own line. {ANSWER_FORMAT}",
    "estimate-then-compute": (
        "First estimate roughly what size the answer should have, then compute it exactly and make sure "
        f"it agrees with your estimate. {ANSWER_FORMAT}"
    ),
    "check-your-work": (
        "Solve the problem, then check your result by working backwards from it to the numbers in the "
        f"question; fix it if the check fails. {ANSWER_FORMAT}"
    ),
}
"""name -> instruction, in the order agents take them by default"""


class UnknownVariantError(ValueError):
    pass


def parse_variants(text: str) -> tuple[str, ...]:
    """Comma-separated variant names ('' for every shipped variant, in order); an unknown or
    repeated name is an error that lists the shipped ones."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        return tuple(VARIANTS)
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        raise UnknownVariantError(
            f"unknown instruction variant(s) {', '.join(map(repr, unknown))} in --variants; the variants: "
            f"{', '.join(VARIANTS)} (comma-separated, e.g. --variants plain,check-your-work)"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UnknownVariantError(
            f"--variants names {', '.join(repeated)} twice; name each variant once (--agents beyond the "
            "variants cycles through them again)"
        )
    return names
