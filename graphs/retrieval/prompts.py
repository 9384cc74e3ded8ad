"""The fixed prompts of the retrieval game.

Scores depend on these strings: before/after comparisons are only valid while they stay
unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.policies.base import Message
from graphs.retrieval.corpus import Document
from graphs.retrieval.index import Hit

INTRO = (
    "You answer a question by searching a collection of documents. You do not know the answer "
    "yourself: search first, then answer from what the documents say.\n"
    "Each turn, write exactly one line, either\n"
    "Search: <a few keywords from the question>\n"
    "or, once the results state the answer,\n"
    "Answer: <the answer> [<ids of the documents you used>]"
)

RELEVANCE_QUESTION = (
    "Do the documents the researcher cited state the facts needed to answer the question, and "
    "does the answer follow from them?"
)


def searches_left(left: int) -> str:
    if left <= 0:
        return "You have no searches left. Write one line: 'Answer: <answer> [doc ids]'."
    times = "1 more time" if left == 1 else f"{left} more times"
    return f"You may search {times}. Write one line: 'Search: <keywords>' or 'Answer: <answer> [doc ids]'."


def researcher_messages(question: str, exchanges: Sequence[tuple[str, str]], limit: int, *,
                        opened: bool = False) -> list[Message]:
    """The researcher's conversation: the question, then each of its search replies (assistant)
    and their results (user), each user message ending with the searches left. ``opened``: the
    first exchange is the game's free opening search, whose results stand in the first message
    before the question (as an assistant line, a small model repeats it instead of answering)."""
    opening = f"{exchanges[0][1]}\n\n" if opened else ""
    first = f"{INTRO}\n\n{opening}Question: {question}\n{searches_left(limit)}"
    messages: list[Message] = [{"role": "user", "content": first}]
    for done, (reply, results) in enumerate(exchanges[opened:], start=1):
        messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": f"{results}\n{searches_left(limit - done)}"})
    return messages


def results_text(query: str, hits: Sequence[Hit]) -> str:
    """What a search shows: one line per document, best first."""
    if not hits:
        return f"No document matches {query!r}."
    return f"Results for {query!r}:\n" + "\n".join(hit.doc.line() for hit in hits)


def relevance_material(question: str, answer: str | None, cited: Sequence[Document | str]) -> str:
    """What an LLM judge of relevance reads: the question, the answer and the cited documents
    (an id the researcher made up is shown as unknown)."""
    lines = [d.line() if isinstance(d, Document) else f"[{d}] (no such document)" for d in cited]
    return (f"Question: {question}\nResearcher's answer: {answer or '(none)'}\nDocuments cited:\n"
            + ("\n".join(lines) if lines else "(none)"))
