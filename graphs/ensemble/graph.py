"""The ensemble graph: answer (all agents at once) -> decide -> end."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.context import EpisodeContext
from graphs.ensemble import nodes
from graphs.ensemble.state import State


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("answer", nodes.answer)
    graph.add_node("decide", nodes.decide)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", "decide")
    graph.add_edge("decide", END)
    return graph.compile()
