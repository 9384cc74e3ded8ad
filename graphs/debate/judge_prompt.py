"""The debate's judge prompt read back for a trained verifier in the judge seat: the
candidates are each debater's last argument, the verdict ``Winner: A|B``."""

from __future__ import annotations

import re

from graphs.debate.prompts import JUDGE_INSTRUCTIONS
from graphs.judges.reward_verifier import JudgePrompt, JudgePromptError

_DEBATE_HEAD = "You are the judge of a debate.\n\nQuestion: "
_DEBATE_TAIL = "\n\n" + JUDGE_INSTRUCTIONS
_DEBATE_TRANSCRIPT = "\n\nTranscript:\n\n"
_DEBATE_ENTRY = re.compile(r"^Debater ([AB]) \(round \d+\):\n", re.MULTILINE)


def read_judge_prompt(content: str) -> JudgePrompt | None:
    """The question and each debater's last argument, read back from the text of
    ``prompts.judge_messages``; None for another text."""
    if not (content.startswith(_DEBATE_HEAD) and content.endswith(_DEBATE_TAIL)):
        return None
    question, found, transcript = content[len(_DEBATE_HEAD): -len(_DEBATE_TAIL)].partition(_DEBATE_TRANSCRIPT)
    entries = list(_DEBATE_ENTRY.finditer(transcript)) if found else []
    last: dict[str, str] = {}
    for entry, following in zip(entries, [*entries[1:], None], strict=True):
        end = len(transcript) if following is None else following.start() - 2  # the "\n\n" between entries
        last[entry[1]] = transcript[entry.end(): end]
    if set(last) != {"A", "B"}:
        raise JudgePromptError("the debate judge prompt holds no argument of both debaters")
    return JudgePrompt(question, ("Debater A", "Debater B"), (last["A"], last["B"]), lambda i: f"Winner: {'AB'[i]}")
