"""A trained verifier in a judge seat: which judge prompts it can read, and its verdict.

A judge seat filled with ``verifier:NAME`` (``graphs.policies.verifier``) gets the judge
prompt its game builds for a model, like any policy. The verifier reads the candidate answers
back out of that prompt, scores each one with its reward model as the answer to the question
(``[user: question, assistant: answer]``), and names the highest-scoring candidate in the line
the game parses; its rationale lists every score and whether it clears the model's threshold.

A game whose judge picks one of several answers says how its judge prompt is read back
(``GameSpec.judge_prompt``, a ``JudgePromptReader``: debate's and ensemble's); judges that
score a rubric or check ground truth by rule have no answer to pick, so a verifier does not
fill them. A reader parses the exact text of its game's ``prompts.judge_messages``; the tests
build prompts with those functions, so a change to a prompt's format breaks a test rather
than a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

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


JudgePromptReader = Callable[[str], JudgePrompt | None]
"""A game's reader of its judge prompt (the content of its last message): the prompt read
back, or None when the text is not that game's judge prompt (``GameSpec.judge_prompt``)."""


def read_judge_prompt(messages: Sequence[Message], readers: Mapping[str, JudgePromptReader]) -> JudgePrompt:
    """The question and candidates of a judge prompt of one of the games of ``readers``
    (game name -> its reader)."""
    content = messages[-1]["content"] if messages else ""
    for read in readers.values():
        prompt = read(content)
        if prompt is not None:
            return prompt
    raise JudgePromptError(
        f"this is not the judge prompt of {' or '.join(readers) or 'any game'}: a trained verifier fills only the "
        "judge seats that pick one of several answers"
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
