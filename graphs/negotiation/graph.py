"""The negotiation graph: proposer -> counterpart -> proposer ... until an Accept or max_turns,
then the judge."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.context import EpisodeContext
from graphs.negotiation import nodes
from graphs.negotiation.state import State

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode: one per move (``options.max_turns`` bounds them) and the
judge; LangGraph's default of 25 would cut games of more than 24 moves."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("proposer", nodes.proposer)
    graph.add_node("counterpart", nodes.counterpart)
    graph.add_node("judge", nodes.judge)
    graph.add_edge(START, "proposer")
    graph.add_conditional_edges("proposer", nodes.after_move)
    graph.add_conditional_edges("counterpart", nodes.after_move)
    graph.add_edge("judge", END)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
