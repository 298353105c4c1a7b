"""The MCP scenario's agent for Google ADK (tests/support/mcp_scenario.py): ADK's own MCP client,
``MCPToolset``, pointed at Tether in one line: ``StreamableHTTPConnectionParams(url=tether.mcp_url(...))``
(``httpx_client_factory=tether.mcp_http_client``: in process) or
``StdioServerParameters(**tether.mcp_stdio(...))``."""

from __future__ import annotations

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.mcp_tool import MCPToolset, StreamableHTTPConnectionParams
from google.adk.tools.mcp_tool.mcp_session_manager import StdioConnectionParams
from mcp.client.stdio import StdioServerParameters

import tether
from tether_google_adk import run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    connection: StreamableHTTPConnectionParams | StdioConnectionParams
    if "url" in target:
        # In process: the session's HTTP client is Tether's (no loopback hop); else the proxy's URL alone.
        in_process: dict[str, Any] = {"httpx_client_factory": tether.mcp_http_client} if target.get("in_process") else {}
        connection = StreamableHTTPConnectionParams(url=tether.mcp_url(target["url"], name="ledger"), **in_process)
    else:
        params = StdioServerParameters(**tether.mcp_stdio(target["command"], target["args"], name="ledger"))
        connection = StdioConnectionParams(server_params=params, timeout=30)
    toolset = MCPToolset(connection_params=connection)
    try:
        agent = LlmAgent(name="cashier", model="gemini-2.5-flash", instruction="Charge customers with your tools.", tools=[toolset])
        return await run_agent(prompt, agent=agent, **run_args)
    finally:
        await toolset.close()
