"""The discussion graph: discuss (one round of every agent) x rounds -> end."""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, StateGraph

from graphs.context import EpisodeContext
from graphs.discussion import nodes
from graphs.discussion.state import State

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode. The loop is bounded by ``options.rounds`` (one step a
round); LangGraph's default of 25 steps would cut discussions of more than 24 rounds."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("discuss", nodes.discuss)
    graph.add_edge(START, "discuss")
    graph.add_conditional_edges("discuss", nodes.after_round)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
