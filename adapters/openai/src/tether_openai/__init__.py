"""Tether for the OpenAI Agents SDK: durable ``agents.Agent`` runs.

    from tether_openai import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("...", agent="myapp.agents:triage")   # bring your own agents.Agent

The SDK's own ``Runner`` runs the loop (tools, handoffs, guardrails); Tether journals every model
request at the wire and every tool call at the tool seam, and maps ``memory_key`` onto the SDK's
``Session`` protocol (:class:`TetherSession`).
"""

from tether.adapter_package import Tool, package, requires, tool

requires("tether-openai", "the OpenAI Agents SDK (openai-agents)", "agents")

from .adapter import OpenAIAgentsAdapter, function_tool, seam_client
from .memory import TetherSession

ADAPTER, run_agent, run_agent_sync = package(OpenAIAgentsAdapter())

__all__ = [
    "ADAPTER",
    "OpenAIAgentsAdapter",
    "TetherSession",
    "Tool",
    "function_tool",
    "run_agent",
    "run_agent_sync",
    "seam_client",
    "tool",
]
