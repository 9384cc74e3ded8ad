"""The math-reflection graph: actor -> judge -> critic -> (actor -> judge -> critic)* -> end.

The critic reviews every answer, the last one included, even with ``turns=1``: its verdict
accuracy is then measured on every episode, and the final review is critic training data
although no refinement follows it. With ``stop_when_right``, a right answer ends the episode
unreviewed.
"""

from __future__ import annotations

from typing import Any

from langgraph.graph import START, StateGraph

from graphs.context import EpisodeContext
from graphs.math_reflection import nodes
from graphs.math_reflection.state import State

RECURSION_LIMIT = 10_000
"""Graph steps allowed per episode. The loop is bounded by ``options.turns`` (3 steps a
turn); LangGraph's default of 25 steps would cut episodes of more than 8 turns."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("actor", nodes.actor)
    graph.add_node("judge", nodes.judge)
    graph.add_node("critic", nodes.critic)
    graph.add_edge(START, "actor")
    graph.add_edge("actor", "judge")
    graph.add_conditional_edges("judge", nodes.after_judge)
    graph.add_conditional_edges("critic", nodes.after_critic)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
