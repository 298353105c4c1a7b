"""The MCP scenario's agent for the OpenAI Agents SDK (tests/support/mcp_scenario.py): the SDK's own
MCP clients, ``MCPServerStreamableHttp`` (through the proxy, or in process with
``tether.mcp_http_client``) and ``MCPServerStdio``, pointed at Tether in one line each."""

from __future__ import annotations

from typing import Any, cast

from agents import Agent
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStdioParams, MCPServerStreamableHttp, MCPServerStreamableHttpParams

import tether
from tether_openai import run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    server: MCPServer
    if "url" in target:
        url = tether.mcp_url(target["url"], name="ledger")
        # In process: the SDK's HTTP client is Tether's (no loopback hop); else the proxy's URL alone.
        params: MCPServerStreamableHttpParams = {"url": url}
        if target.get("in_process"):
            params["httpx_client_factory"] = tether.mcp_http_client
        server = MCPServerStreamableHttp(params=params, name="ledger")
    else:
        server = MCPServerStdio(
            params=cast(MCPServerStdioParams, tether.mcp_stdio(target["command"], target["args"], name="ledger")), name="ledger"
        )
    async with server:
        agent = Agent(name="cashier", instructions="Charge customers with your tools.", model="gpt-4o-mini", mcp_servers=[server])
        return await run_agent(prompt, agent=agent, **run_args)
