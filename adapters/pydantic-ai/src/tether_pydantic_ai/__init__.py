"""Tether for Pydantic AI: durable model turns, tools, message history and approvals.

    from tether_pydantic_ai import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="openai:gpt-4o-mini", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:agent")   # your own Agent

``pydantic_tool(t)`` turns a Tether tool into a ``pydantic_ai.Tool`` for agents you build yourself.
"""

from tether.adapter_package import Tool, package, requires, tool

requires("tether-pydantic-ai", "Pydantic AI (pydantic-ai-slim[openai])", "pydantic_ai")

from .adapter import PydanticAIAdapter, SeamProviders, pydantic_tool, route_model, routed
from .memory import MessageHistory

ADAPTER, run_agent, run_agent_sync = package(PydanticAIAdapter())

__all__ = [
    "ADAPTER",
    "MessageHistory",
    "PydanticAIAdapter",
    "SeamProviders",
    "Tool",
    "pydantic_tool",
    "route_model",
    "routed",
    "run_agent",
    "run_agent_sync",
    "tool",
]
