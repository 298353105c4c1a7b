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

from tether.adapter_package import Tool, package, requires, tool

requires("tether-claude", "the Claude Agent SDK (claude-agent-sdk)", "claude_agent_sdk")

from .adapter import OFFLINE_ENV, SERVER, ClaudeAdapter, ClaudeAgent, mcp_tool, tool_name

ADAPTER, run_agent, run_agent_sync = package(ClaudeAdapter())

__all__ = [
    "ADAPTER",
    "OFFLINE_ENV",
    "SERVER",
    "ClaudeAdapter",
    "ClaudeAgent",
    "Tool",
    "mcp_tool",
    "run_agent",
    "run_agent_sync",
    "tool",
    "tool_name",
]
