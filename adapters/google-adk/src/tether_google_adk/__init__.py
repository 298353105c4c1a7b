"""Tether for Google ADK: durable model turns, tools, sessions and approvals.

    from tether_google_adk import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gemini-2.5-flash", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:root_agent")   # your own agent

``adk_tool(t)`` turns a Tether tool into an ADK ``FunctionTool`` for agents you build yourself.
"""

from tether.adapter_package import Tool, package, requires, tool

requires("tether-google-adk", "Google ADK (google-adk)", "google.adk")

from .adapter import GoogleADKAdapter, SeamModels, adk_tool
from .memory import SessionEvents

ADAPTER, run_agent, run_agent_sync = package(GoogleADKAdapter())

__all__ = ["ADAPTER", "GoogleADKAdapter", "SeamModels", "SessionEvents", "Tool", "adk_tool", "run_agent", "run_agent_sync", "tool"]
