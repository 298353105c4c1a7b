"""Tether for Google ADK: durable model turns, tools, sessions and approvals.

    from tether_google_adk import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gemini-2.5-flash", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:root_agent")   # your own agent

``adk_tool(t)`` turns a Tether tool into an ADK ``FunctionTool`` for agents you build yourself.
"""

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-google-adk", "Google ADK (google-adk)", "google.adk")

from .adapter import GoogleADKAdapter as GoogleADKAdapter
from .adapter import SeamModels as SeamModels
from .adapter import adk_tool as adk_tool
from .memory import SessionEvents as SessionEvents

ADAPTER, run_agent, run_agent_sync = package(GoogleADKAdapter())
