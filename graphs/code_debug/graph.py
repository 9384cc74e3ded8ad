"""The code-debug graph: (inspect | breaker) -> fixer -> judge -> (fixer -> judge)* -> [review] -> end."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.code_debug import nodes
from graphs.code_debug.state import State
from graphs.context import EpisodeContext

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode; the loop is bounded by ``options.attempts`` (2 steps each)."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("inspect", nodes.inspect)
    graph.add_node("breaker", nodes.breaker)
    graph.add_node("fixer", nodes.fixer)
    graph.add_node("judge", nodes.judge)
    graph.add_node("review", nodes.review)
    graph.add_conditional_edges(START, nodes.start)
    graph.add_edge("inspect", "fixer")
    graph.add_edge("breaker", "fixer")
    graph.add_edge("fixer", "judge")
    graph.add_conditional_edges("judge", nodes.after_judge)
    graph.add_edge("review", END)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
