"""Tether for LangChain: durable ``langchain.agents.create_agent`` runs.

    from tether_langchain import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("...", agent="myapp.agents:agent")   # bring your own agent

LangChain runs the loop (the agent graph, tool calling, middleware); Tether journals every model
request at the wire (``ChatOpenAI`` over the seam's httpx transport) and every tool call at the
tool seam, and keeps ``memory_key`` as the agent's message history (:class:`MessageHistory`).
"""

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-langchain", "LangChain and langchain-openai", "langchain.agents", "langchain_openai")

from tether_langgraph.family import answer_text as answer_text
from tether_langgraph.family import chat_model as chat_model
from tether_langgraph.family import langchain_tool as langchain_tool
from tether_langgraph.family import openai_base_url as openai_base_url
from tether_langgraph.family import routed_env as routed_env
from tether_langgraph.family import tool_errors as tool_errors

from .adapter import LangChainAdapter as LangChainAdapter
from .memory import MessageHistory as MessageHistory

ADAPTER, run_agent, run_agent_sync = package(LangChainAdapter())
