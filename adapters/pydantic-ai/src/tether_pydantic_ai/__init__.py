"""Tether for Pydantic AI: durable model turns, tools, message history and approvals.

    from tether_pydantic_ai import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="openai:gpt-4o-mini", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:agent")   # your own Agent

``pydantic_tool(t)`` turns a Tether tool into a ``pydantic_ai.Tool`` for agents you build yourself.
"""

try:
    import pydantic_ai  # noqa: F401
except ImportError as e:  # pragma: no cover - the import guard names what to install
    raise ImportError("tether-pydantic-ai needs Pydantic AI: pip install 'tether-pydantic-ai' (pydantic-ai-slim[openai])") from e

from tether.agent import Tool, bind, tool

from .adapter import PydanticAIAdapter, SeamProviders, pydantic_tool, route_model, routed
from .memory import MessageHistory

ADAPTER = PydanticAIAdapter()
run_agent, run_agent_sync = bind(ADAPTER)

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
