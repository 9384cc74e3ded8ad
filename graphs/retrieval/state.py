"""The typed state of a retrieval episode.

``messages`` is the researcher's exchange with the search tool in LangChain's form, which
LangGraph's ``ToolNode`` reads and extends: each researcher reply is an ``AIMessage`` (with a
``search`` tool call when it searched), each search's results a ``ToolMessage`` (its artifact:
the ids of the documents shown).
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages


class Planted(TypedDict):
    id: str
    title: str
    text: str
    wrong_values: list[str]
    """numbers it states that the gold document it imitates does not"""


class Step(TypedDict):
    turn_id: str | None
    """the researcher's turn; None for the game's opening search of the question"""
    kind: Literal["search", "answer"]
    text: str | None
    """the query, or the answer without citations (None: the reply stated no answer)"""
    cited: list[str]
    formatted: bool
    """written as a 'Search:' or 'Answer:' line (else an answer in prose)"""


class Verdict(TypedDict):
    correct: bool
    relevance: float
    """share of the cited documents that are gold documents (0 when none is cited)"""
    cited_gold: float
    """share of the gold documents cited"""
    fooled: bool
    """cited a distractor it was shown, or stated a number only such a distractor states"""
    judge_relevance: float | None
    """a model judge's relevance score (0..1), None without one"""


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    planted: list[Planted]
    steps: Annotated[list[Step], operator.add]
    verdict: Verdict | None
