"""The story graph: writer -> (co_writer -> writer) x (rounds - 1) -> judge -> end."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.context import EpisodeContext
from graphs.story import nodes
from graphs.story.state import State

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode: 2 a round (LangGraph's default of 25 would cut long stories)."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("writer", nodes.writer)
    graph.add_node("co_writer", nodes.co_writer)
    graph.add_node("judge", nodes.judge)
    graph.add_edge(START, "writer")
    graph.add_conditional_edges("writer", nodes.after_writer)
    graph.add_edge("co_writer", "writer")
    graph.add_edge("judge", END)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
