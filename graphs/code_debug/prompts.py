"""The fixed prompts of code-debug (the fixer's pass rate depends on them: hold them fixed
when comparing versions)."""

from __future__ import annotations

from graphs.judges.rubric import Rubric
from graphs.policies.base import Message

ANSWER_FORMAT = "Reply with the whole corrected function in one ```python code block."

QUALITY = Rubric(
    "code_quality",
    "How good is this Python fix as code: correct for the task, clear, and no more complicated than needed?",
)


def fixer_messages(description: str, buggy: str, report: str) -> list[Message]:
    return [{
        "role": "user",
        "content": f"This Python function has a bug.\n\nWhat it should do: {description}\n\n```python\n"
                   f"{buggy.rstrip()}\n```\n\nIts tests say:\n{report}\n\nFix the bug. {ANSWER_FORMAT}",
    }]


def retry_message(report: str) -> Message:
    return {"role": "user", "content": f"Your fix does not pass yet. The tests say:\n{report}\n\n"
                                       f"Fix it. {ANSWER_FORMAT}"}


def breaker_messages(description: str, reference: str) -> list[Message]:
    return [{
        "role": "user",
        "content": f"This Python function is correct.\n\nWhat it does: {description}\n\n```python\n"
                   f"{reference.rstrip()}\n```\n\nIntroduce one small, realistic bug (a comparison or an operator "
                   "slightly wrong, a number off by one) so that some of its tests fail. Keep its name and "
                   "parameters. Reply with the whole buggy function in one ```python code block.",
    }]


def quality_material(description: str, code: str, cause: str) -> str:
    return f"Task: {description}\n\nFix:\n```python\n{code.rstrip()}\n```\n\nTests: {cause}"
