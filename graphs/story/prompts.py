"""The fixed prompts of the story game.

A passage prompt is one user message that states the whole story state (premise, constraints,
the story so far, what to write now), so the writer's candidates of one turn share one prompt,
and scripted co-writers can read the constraints back from it (``graphs/story/bots.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.judges.rubric import Rubric
from graphs.policies.base import Message
from graphs.story.constraints import Constraints
from graphs.story.state import WRITER

ROLES = {"writer": "the writer", "co_writer": "the co-writer"}
CHARACTERS = "Characters who must appear: "
FACTS = "Facts that must stay true:"
ENDING_SENTENCE = "Required ending sentence: "
LAST_TURN = "This is the last passage: end the story now"
NEXT_TURN = "Write only the next passage of the story, continuing from where it stops."

CREATIVITY = Rubric(
    "creativity",
    "Which continuation is more creative: vivid, surprising and original, while still fitting the story?",
)
CREATIVITY_PROXY = "creativity-proxy"
"""the rubric name of the rule proxy's preferences (``graphs/story/rules.new_words``)"""


def constraints_text(c: Constraints) -> str:
    lines = [f"Premise: {c.premise}", CHARACTERS + ", ".join(c.characters), FACTS]
    lines += [f"- {fact.text}" for fact in c.facts]
    if c.forbidden:
        lines.append("Never write: " + "; ".join(f'"{phrase}"' for phrase in c.forbidden))
    if c.ending.sentence:
        lines.append(ENDING_SENTENCE + f'"{c.ending.sentence}"')
    else:
        lines.append(f"Required ending event: {c.ending.event}")
    lines.append(f"Each passage has at most {c.max_words} words.")
    return "\n".join(lines)


def story_text(passages: Sequence[str]) -> str:
    return "\n\n".join(passages) if passages else "(nothing yet: you begin the story)"


def passage_messages(c: Constraints, passages: Sequence[str], seat: str, *, last: bool) -> list[Message]:
    if last:
        ending = (f'with the sentence "{c.ending.sentence}"' if c.ending.sentence
                  else f"with this event: {c.ending.event}")
        instruction = f"{LAST_TURN} {ending}, and make sure every character has appeared."
    else:
        instruction = NEXT_TURN
    partner = "the co-writer" if seat == WRITER else "the writer"
    content = (
        f"You are {ROLES[seat]} of a short story written in turns with {partner}. Keep every constraint.\n\n"
        f"{constraints_text(c)}\n\nStory so far:\n{story_text(passages)}\n\n{instruction}"
    )
    return [{"role": "user", "content": content}]


def judge_context(c: Constraints, passages: Sequence[str]) -> str:
    """What the creativity judge reads before the two continuations."""
    return f"A story written in turns under constraints.\n\n{constraints_text(c)}\n\nStory so far:\n" \
           f"{story_text(passages)}\n\nTwo continuations were proposed:"


def authors_context(c: Constraints, passages: Sequence[str]) -> str:
    """What the judge reads before comparing the writer's passages with the co-writer's."""
    return f"A story written in turns by two authors.\n\n{constraints_text(c)}\n\nThe whole story:\n" \
           f"{story_text(passages)}\n\nBelow are the passages of each author:"
