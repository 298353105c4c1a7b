"""The MCP scenario's agent for LangChain (tests/support/mcp_scenario.py): the MCP client of the
LangChain family, ``langchain-mcp-adapters``' ``MultiServerMCPClient``, pointed at Tether in one
line per server (LangGraph and Deep Agents load MCP tools the same way)."""

from __future__ import annotations

from typing import Any, cast

from langchain.agents import create_agent
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.sessions import Connection, StreamableHttpConnection
from langchain_openai import ChatOpenAI

import tether
from tether_langchain import openai_base_url, run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    if "url" in target:
        http: StreamableHttpConnection = {"transport": "streamable_http", "url": tether.mcp_url(target["url"], name="ledger")}
        if target.get("in_process"):  # the client's HTTP served in process (no loopback hop)
            http["httpx_client_factory"] = tether.mcp_http_client
        server: Connection = http
    else:
        server = cast(Connection, {"transport": "stdio", **tether.mcp_stdio(target["command"], target["args"], name="ledger")})
    tools = await MultiServerMCPClient({"ledger": server}).get_tools()
    model = ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0)
    agent = create_agent(model, tools=tools, system_prompt="Charge customers with your tools.")
    return await run_agent(prompt, agent=agent, **run_args)
