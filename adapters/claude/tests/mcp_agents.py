"""The MCP scenario's agent for the Claude Agent SDK (tests/support/mcp_scenario.py): the CLI is the
MCP client; its ``mcp_servers`` entry is pointed at Tether in one line, ``{"type": "http", "url":
tether.mcp_url(...)}`` or ``{"type": "stdio", **tether.mcp_stdio(...)}``."""

from __future__ import annotations

from typing import Any, cast

from claude_agent_sdk import ClaudeAgentOptions, McpServerConfig

import tether
from tether_claude import run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    if "url" in target:
        server: McpServerConfig = {"type": "http", "url": tether.mcp_url(target["url"], name="ledger")}
    else:
        server = cast(McpServerConfig, {"type": "stdio", **tether.mcp_stdio(target["command"], target["args"], name="ledger")})
    options = ClaudeAgentOptions(
        model="claude-sonnet-4-5",
        system_prompt="Charge customers with your tools.",
        mcp_servers={"ledger": server},
        allowed_tools=["mcp__ledger__charge"],
    )
    return await run_agent(prompt, agent=options, **run_args)
