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

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-openai", "the OpenAI Agents SDK (openai-agents)", "agents")

from .adapter import OpenAIAgentsAdapter as OpenAIAgentsAdapter
from .adapter import function_tool as function_tool
from .adapter import seam_client as seam_client
from .memory import TetherSession as TetherSession

ADAPTER, run_agent, run_agent_sync = package(OpenAIAgentsAdapter())
