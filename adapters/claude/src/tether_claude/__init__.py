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

try:
    import claude_agent_sdk  # noqa: F401
except ImportError as e:  # pragma: no cover - the import guard names what to install
    raise ImportError("tether-claude needs the Claude Agent SDK: pip install 'tether-claude' (claude-agent-sdk)") from e

from tether.agent import Tool, bind, tool

from .adapter import OFFLINE_ENV, SERVER, ClaudeAdapter, ClaudeAgent, mcp_tool, tool_name

ADAPTER = ClaudeAdapter()
run_agent, run_agent_sync = bind(ADAPTER)

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
