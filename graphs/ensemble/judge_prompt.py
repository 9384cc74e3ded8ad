"""The ensemble's judge prompt read back for a trained verifier in the judge seat: the
candidates are the distinct answers, each scored by the solution listed with it; the verdict
``Pick: N``."""

from __future__ import annotations

import re

from graphs.ensemble.prompts import JUDGE_INSTRUCTIONS, PICK_MARKER
from graphs.judges.reward_verifier import JudgePrompt, JudgePromptError

_ENSEMBLE_HEAD = f"{JUDGE_INSTRUCTIONS}\n\nProblem:\n"
_ENSEMBLE_ENTRY = re.compile(r"\n\nAnswer (\d+): .*\nSolution:\n")


def read_judge_prompt(content: str) -> JudgePrompt | None:
    """The problem and each listed answer's solution, read back from the text of
    ``prompts.judge_messages``; None for another text."""
    if not content.startswith(_ENSEMBLE_HEAD):
        return None
    body = content[len(_ENSEMBLE_HEAD):]
    entries = list(_ENSEMBLE_ENTRY.finditer(body))
    numbers = [int(m[1]) for m in entries]
    if not entries or numbers != list(range(1, len(entries) + 1)):
        raise JudgePromptError("the ensemble judge prompt lists no numbered answers")
    solutions = tuple(body[m.end(): (following.start() if following else len(body))]
                      for m, following in zip(entries, [*entries[1:], None], strict=True))
    return JudgePrompt(body[: entries[0].start()], tuple(f"Answer {n}" for n in numbers), solutions,
                       lambda i: f"{PICK_MARKER} {i + 1}")
