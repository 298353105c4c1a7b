"""Tether for Deep Agents: durable ``deepagents.create_deep_agent`` runs.

    from tether_deepagents import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("...", agent="myapp.agents:agent")   # bring your own deep agent

Deep Agents runs the loop (planning, the virtual filesystem, sub-agents through ``task``);
Tether journals every model request at the wire (``ChatOpenAI`` over the seam's httpx transport),
every Tether tool call at the tool seam, and keeps ``memory_key`` as the graph's checkpointed
thread: transcript and virtual files (:class:`TetherCheckpointer`).
"""

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-deepagents", "Deep Agents and langchain-openai", "deepagents", "langchain_openai")

from tether_langgraph.family import TetherCheckpointer as TetherCheckpointer
from tether_langgraph.family import answer_text as answer_text
from tether_langgraph.family import chat_model as chat_model
from tether_langgraph.family import langchain_tool as langchain_tool
from tether_langgraph.family import openai_base_url as openai_base_url
from tether_langgraph.family import routed_env as routed_env

from .adapter import DeepAgentsAdapter as DeepAgentsAdapter

ADAPTER, run_agent, run_agent_sync = package(DeepAgentsAdapter())
