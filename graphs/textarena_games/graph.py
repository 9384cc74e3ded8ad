"""The textarena graph: start -> the seat of the player textarena names, move after move, until
textarena says the game is over -> finish."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from graphs.context import EpisodeContext
from graphs.textarena_games import nodes
from graphs.textarena_games.state import State

RECURSION_LIMIT = 2 * nodes.MAX_MOVES
"""Graph steps allowed per episode: one per move (at most MAX_MOVES), start and finish."""


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("start", nodes.start)
    graph.add_node("player", nodes.player)
    graph.add_node("opponent", nodes.opponent)
    graph.add_node("finish", nodes.finish)
    graph.add_edge(START, "start")
    for node in ("start", "player", "opponent"):
        graph.add_conditional_edges(node, nodes.after_move)
    graph.add_edge("finish", END)
    return graph.compile().with_config(recursion_limit=RECURSION_LIMIT)
