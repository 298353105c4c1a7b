"""Tether for Google ADK: durable model turns, tools, sessions and approvals.

    from tether_google_adk import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gemini-2.5-flash", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:root_agent")   # your own agent

``adk_tool(t)`` turns a Tether tool into an ADK ``FunctionTool`` for agents you build yourself.
"""

try:
    import google.adk  # noqa: F401
except ImportError as e:  # pragma: no cover - the import guard names what to install
    raise ImportError("tether-google-adk needs Google ADK: pip install 'tether-google-adk' (google-adk)") from e

from tether.agent import Tool, bind, tool

from .adapter import GoogleADKAdapter, SeamModels, adk_tool
from .memory import SessionEvents

ADAPTER = GoogleADKAdapter()
run_agent, run_agent_sync = bind(ADAPTER)

__all__ = ["ADAPTER", "GoogleADKAdapter", "SeamModels", "SessionEvents", "Tool", "adk_tool", "run_agent", "run_agent_sync", "tool"]
