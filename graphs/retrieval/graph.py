"""The retrieval graph: planter? -> (opening -> search)? -> researcher -> (search -> researcher)*
-> judge -> end.

The planter runs when the game plants distractors (``--distractors``), the opening search of
the question with ``--first-search``; the researcher loops through the search tool until it
answers or runs out of searches.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.context import EpisodeContext
from graphs.retrieval import nodes
from graphs.retrieval.state import State
from graphs.retrieval.tools import search_node

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode: bounded by ``options.searches`` (2 steps a search);
LangGraph's default of 25 steps would cut episodes of more than 11 searches."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("planter", nodes.planter)
    graph.add_node("opening", nodes.opening)
    graph.add_node("researcher", nodes.researcher)
    graph.add_node("search", search_node())
    graph.add_node("judge", nodes.judge)
    graph.add_conditional_edges(START, nodes.start)
    graph.add_conditional_edges("planter", nodes.after_planter)
    graph.add_edge("opening", "search")
    graph.add_conditional_edges("researcher", nodes.after_researcher)
    graph.add_edge("search", "researcher")
    graph.add_edge("judge", END)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
