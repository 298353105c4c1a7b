"""Tether for CrewAI: durable crews — model turns, tools, approvals and a memory key.

    from tether_crewai import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.crews:crew")   # your own Crew

``crewai_tool(t)`` turns a Tether tool into a CrewAI tool for crews you build yourself. CrewAI's
own telemetry and tracing are switched off when this package is imported.
"""

import os
import sys

# Before CrewAI is imported: nothing about a run leaves the machine but its model requests.
_crewai_was_imported = "crewai" in sys.modules
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"

try:
    import crewai  # noqa: F401
except ImportError as e:  # pragma: no cover - the import guard names what to install
    raise ImportError("tether-crewai needs CrewAI: pip install 'tether-crewai' (crewai)") from e

from tether.agent import Tool, bind, tool  # noqa: E402 - after the environment above

from .adapter import CrewAIAdapter, SeamLLMs, crewai_tool, telemetry_off  # noqa: E402
from .memory import Transcript  # noqa: E402

if _crewai_was_imported:
    telemetry_off()

ADAPTER = CrewAIAdapter()
run_agent, run_agent_sync = bind(ADAPTER)

__all__ = ["ADAPTER", "CrewAIAdapter", "SeamLLMs", "Tool", "Transcript", "crewai_tool", "run_agent", "run_agent_sync", "tool"]
