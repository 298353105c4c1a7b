"""Tether for the Claude Agent SDK: durable model turns (through the SDK's bundled CLI), tools,
session transcripts and approvals.

    from tether_claude import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="claude-sonnet-4-5", tools=[get_weather])
    result = await run_agent("Weather in Paris?", agent="myapp.agents:options")   # your own ClaudeAgentOptions

``ClaudeAgent(options, tools)`` pairs your own ``ClaudeAgentOptions`` (subagents, built-in tools…)
with Tether tools, served to the CLI as the in-process MCP server ``tether``.
"""

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-claude", "the Claude Agent SDK (claude-agent-sdk)", "claude_agent_sdk")

from .adapter import OFFLINE_ENV as OFFLINE_ENV
from .adapter import SERVER as SERVER
from .adapter import ClaudeAdapter as ClaudeAdapter
from .adapter import ClaudeAgent as ClaudeAgent
from .adapter import mcp_tool as mcp_tool
from .adapter import tool_name as tool_name

ADAPTER, run_agent, run_agent_sync = package(ClaudeAdapter())
