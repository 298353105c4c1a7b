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

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-crewai", "CrewAI (crewai)", "crewai")

from .adapter import CrewAIAdapter as CrewAIAdapter
from .adapter import SeamLLMs as SeamLLMs
from .adapter import crewai_tool as crewai_tool
from .adapter import telemetry_off
from .memory import Transcript as Transcript

if _crewai_was_imported:
    telemetry_off()

ADAPTER, run_agent, run_agent_sync = package(CrewAIAdapter())
