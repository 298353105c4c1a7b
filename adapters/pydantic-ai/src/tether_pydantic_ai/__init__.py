"""Tether for Pydantic AI: durable model turns, tools, message history and approvals.

    from tether_pydantic_ai import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="openai:gpt-4o-mini", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:agent")   # your own Agent

``pydantic_tool(t)`` turns a Tether tool into a ``pydantic_ai.Tool`` for agents you build yourself.
"""

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-pydantic-ai", "Pydantic AI (pydantic-ai-slim[openai])", "pydantic_ai")

from .adapter import PydanticAIAdapter as PydanticAIAdapter
from .adapter import SeamProviders as SeamProviders
from .adapter import pydantic_tool as pydantic_tool
from .adapter import route_model as route_model
from .adapter import routed as routed
from .memory import MessageHistory as MessageHistory

ADAPTER, run_agent, run_agent_sync = package(PydanticAIAdapter())
