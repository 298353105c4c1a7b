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

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-langgraph", "LangGraph and langchain-openai", "langchain_openai", "langgraph.graph")

from .adapter import LangGraphAdapter as LangGraphAdapter
from .adapter import agent_graph as agent_graph
from .adapter import on_tool_error as on_tool_error
from .adapter import tool_node as tool_node
from .family import answer_text as answer_text
from .family import chat_model as chat_model
from .family import langchain_tool as langchain_tool
from .family import openai_base_url as openai_base_url
from .family import routed_env as routed_env
from .memory import TetherCheckpointer as TetherCheckpointer

ADAPTER, run_agent, run_agent_sync = package(LangGraphAdapter())
