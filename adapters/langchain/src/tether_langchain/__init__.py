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

from tether.adapter_package import Tool, package, requires, tool

requires("tether-langchain", "LangChain and langchain-openai", "langchain.agents", "langchain_openai")

from .adapter import LangChainAdapter, answer_text, chat_model, langchain_tool, openai_base_url, routed_env, tool_errors
from .memory import MessageHistory

ADAPTER, run_agent, run_agent_sync = package(LangChainAdapter())

__all__ = [
    "ADAPTER",
    "LangChainAdapter",
    "MessageHistory",
    "Tool",
    "answer_text",
    "chat_model",
    "langchain_tool",
    "openai_base_url",
    "routed_env",
    "run_agent",
    "run_agent_sync",
    "tool",
    "tool_errors",
]
