"""A trained verifier in a judge seat: which judge prompts it can read, and its verdict.

A judge seat filled with ``verifier:NAME`` (``graphs.policies.verifier``) gets the judge
prompt its game builds for a model, like any policy. The verifier reads the candidate answers
back out of that prompt, scores each one with its reward model as the answer to the question
(``[user: question, assistant: answer]``), and names the highest-scoring candidate in the line
the game parses; its rationale lists every score and whether it clears the model's threshold.

Readers exist for the judges that pick one of several answers:

- ``debate``: the candidates are each debater's last argument; the verdict ``Winner: A|B``;
- ``ensemble``: the candidates are the distinct answers, each scored by the solution listed
  with it; the verdict ``Pick: N``.

The other judges score a rubric (story, negotiation, code-debug, retrieval) or check ground
truth by rule (math-reflection, discussion): there is no answer to pick, so a verifier does
not fill them (``JUDGE_GAMES``). A reader parses the exact text of its game's
``prompts.judge_messages``; the tests build prompts with those functions, so a change to a
prompt's format breaks a test rather than a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphs.debate import prompts as debate_prompts
from graphs.ensemble import prompts as ensemble_prompts
from graphs.policies.base import Message


class JudgePromptError(ValueError):
    """The judge prompt is not one a trained verifier can read."""


@dataclass(frozen=True)
class JudgePrompt:
    """What a verifier needs from a judge prompt."""

    question: str
    labels: tuple[str, ...]
    """how the rationale names each candidate ("Debater A", "Answer 2")"""
    answers: tuple[str, ...]
    """the text scored for each candidate"""
    verdict: Callable[[int], str]
    """the game's verdict line naming candidate ``i`` ("Winner: A", "Pick: 2")"""

    def scored(self) -> list[list[Message]]:
        """Each candidate as the conversation the reward model scores."""
        return [[{"role": "user", "content": self.question}, {"role": "assistant", "content": answer}]
                for answer in self.answers]


_DEBATE_HEAD = "You are the judge of a debate.\n\nQuestion: "
_DEBATE_TAIL = "\n\n" + debate_prompts.JUDGE_INSTRUCTIONS
_DEBATE_TRANSCRIPT = "\n\nTranscript:\n\n"
_DEBATE_ENTRY = re.compile(r"^Debater ([AB]) \(round \d+\):\n", re.MULTILINE)


def _read_debate(content: str) -> JudgePrompt | None:
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


_ENSEMBLE_HEAD = f"{ensemble_prompts.JUDGE_INSTRUCTIONS}\n\nProblem:\n"
_ENSEMBLE_ENTRY = re.compile(r"\n\nAnswer (\d+): .*\nSolution:\n")


def _read_ensemble(content: str) -> JudgePrompt | None:
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
                       lambda i: f"{ensemble_prompts.PICK_MARKER} {i + 1}")


JUDGE_GAMES: dict[str, Callable[[str], JudgePrompt | None]] = {"debate": _read_debate, "ensemble": _read_ensemble}
"""The games whose judge seat a trained verifier can fill, with the reader of each one's judge prompt."""


def read_judge_prompt(messages: Sequence[Message]) -> JudgePrompt:
    """The question and candidates of a judge prompt of one of ``JUDGE_GAMES``."""
    content = messages[-1]["content"] if messages else ""
    for read in JUDGE_GAMES.values():
        prompt = read(content)
        if prompt is not None:
            return prompt
    raise JudgePromptError(
        f"this is not the judge prompt of {' or '.join(JUDGE_GAMES)}: a trained verifier fills only the judge seats "
        "that pick one of several answers"
    )


def decide(prompt: JudgePrompt, scores: Sequence[float], *, verifier: str, threshold: float) -> tuple[int, str]:
    """The candidate with the highest score (the first of equal ones) and the rationale."""
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    listed = "; ".join(
        f"{label} {score:.3f} ({'above' if score > threshold else 'not above'} the threshold: "
        f"judged {'correct' if score > threshold else 'incorrect'})"
        for label, score in zip(prompt.labels, scores, strict=True)
    )
    return best, f"Verifier {verifier} scored each answer (threshold {threshold:.3f}): {listed}."
