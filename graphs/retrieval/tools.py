"""The search tool: a LangChain tool over the episode's corpus, run by LangGraph's ToolNode.

A researcher's ``Search: <query>`` line becomes a standard tool call on an ``AIMessage``
(nodes.researcher), so a model that emits tool calls itself would need no other change. The
tool reads the episode's corpus and planted documents from the ToolNode's injected runtime.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode, ToolRuntime

from graphs.retrieval.corpus import Document, corpus_for
from graphs.retrieval.prompts import results_text

SEARCH_TOOL = "search"


@tool(SEARCH_TOOL, response_format="content_and_artifact")
async def search(query: str, runtime: ToolRuntime[Any, Any]) -> tuple[str, list[str]]:
    """Full-text search of the document collection: the best matching documents for the query's words."""
    ctx = runtime.context
    ctx.stage = f"search {query[:60]!r}"
    planted = [Document(p["id"], p["title"], p["text"]) for p in runtime.state["planted"]]
    hits = corpus_for(ctx.options.corpus).index.search(query, ctx.options.results, planted)
    return results_text(query, hits), [hit.doc.id for hit in hits]


def search_node() -> ToolNode:
    """The graph's search step; a failing search fails its episode (recorded at that stage)."""
    return ToolNode([search], handle_tool_errors=False)
