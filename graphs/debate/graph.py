"""The debate graph: (debater_a -> debater_b) x rounds -> judge -> end."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.context import EpisodeContext
from graphs.debate import nodes
from graphs.debate.state import State

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode. The loop is bounded by ``options.rounds`` (2 steps a
round); LangGraph's default of 25 steps would cut debates of more than 11 rounds."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("debater_a", nodes.debater_a)
    graph.add_node("debater_b", nodes.debater_b)
    graph.add_node("judge", nodes.judge)
    graph.add_edge(START, "debater_a")
    graph.add_edge("debater_a", "debater_b")
    graph.add_conditional_edges("debater_b", nodes.after_debater_b)
    graph.add_edge("judge", END)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
