"""The MCP scenario's agent for Pydantic AI (tests/support/mcp_scenario.py): its own MCP client,
``MCPToolset`` (``MCPServerStreamableHTTP`` and ``MCPServerStdio`` before 2.0), pointed at Tether
in one line: the URL from ``tether.mcp_url`` (with ``http_client=tether.mcp_http_client()``: in
process), or a stdio transport from ``tether.mcp_stdio``."""

from __future__ import annotations

from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

import tether
from tether_pydantic_ai import run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    if "url" in target:
        # In process: the toolset's HTTP client is Tether's (no loopback hop); else the proxy's URL alone.
        http_client = tether.mcp_http_client() if target.get("in_process") else None
        toolset = MCPToolset(tether.mcp_url(target["url"], name="ledger"), http_client=http_client)
    else:
        toolset = MCPToolset(StdioTransport(**tether.mcp_stdio(target["command"], target["args"], name="ledger")))
    agent = Agent("openai-chat:gpt-4o-mini", instructions="Charge customers with your tools.", toolsets=[toolset])
    return await run_agent(prompt, agent=agent, **run_args)
