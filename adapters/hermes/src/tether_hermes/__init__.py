"""Tether for Hermes Agent: durable model turns, tools, transcripts and approvals.

    from tether_hermes import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:make_agent")   # your own agent

A bring-your-own agent is a factory ``make_agent(base_url=..., api_key=...) -> AIAgent`` (or a
``HermesAgent(factory, tools=[...])`` to give it Tether tools): Hermes builds its HTTP clients in
its constructor, so Tether has to hand it the base URL before.
"""

import os
import tempfile

# Hermes resolves some paths under its home at import time; without a HERMES_HOME they would be
# the host's ~/.hermes. Each attempt then gets its own fresh home (see adapter.py).
os.environ.setdefault("HERMES_HOME", tempfile.mkdtemp(prefix="tether-hermes-"))

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-hermes", "Hermes Agent (hermes-agent)", "run_agent")

from .adapter import TOOLSET as TOOLSET
from .adapter import HermesAdapter as HermesAdapter
from .adapter import HermesAgent as HermesAgent
from .adapter import parameters_schema as parameters_schema
from .memory import Transcript as Transcript

ADAPTER, run_agent, run_agent_sync = package(HermesAdapter())
