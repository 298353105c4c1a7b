"""Tether for LangGraph: durable runs of compiled graphs.

    from tether_langgraph import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("...", agent="myapp.graphs:graph")   # bring your own compiled graph

LangGraph runs the loop (its Pregel runtime, ``ToolNode``, your nodes and edges); Tether journals
every model request at the wire (``ChatOpenAI`` over the seam's httpx transport) and every tool
call at the tool seam, and keeps ``memory_key`` as a LangGraph thread in a checkpointer over the
store (:class:`TetherCheckpointer`).
"""

from tether.adapter_package import Tool, package, requires, tool

requires("tether-langgraph", "LangGraph and langchain-openai", "langchain_openai", "langgraph.graph")

from .adapter import (
    LangGraphAdapter,
    agent_graph,
    answer_text,
    chat_model,
    langchain_tool,
    on_tool_error,
    openai_base_url,
    routed_env,
    tool_node,
)
from .memory import TetherCheckpointer

ADAPTER, run_agent, run_agent_sync = package(LangGraphAdapter())

__all__ = [
    "ADAPTER",
    "LangGraphAdapter",
    "TetherCheckpointer",
    "Tool",
    "agent_graph",
    "answer_text",
    "chat_model",
    "langchain_tool",
    "on_tool_error",
    "openai_base_url",
    "routed_env",
    "run_agent",
    "run_agent_sync",
    "tool",
    "tool_node",
]
