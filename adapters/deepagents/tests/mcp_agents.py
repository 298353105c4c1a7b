"""The MCP scenario's agent for Deep Agents (tests/support/mcp_scenario.py): tools from the LangChain
family's MCP client, ``langchain-mcp-adapters``' ``MultiServerMCPClient``, pointed at Tether in one
line per server, given to ``create_deep_agent``."""

from __future__ import annotations

from typing import Any, cast

from deepagents import create_deep_agent
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.sessions import Connection
from langchain_openai import ChatOpenAI

import tether
from tether_deepagents import openai_base_url, run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    if "url" in target:
        server: Connection = {"transport": "streamable_http", "url": tether.mcp_url(target["url"], name="ledger")}
    else:
        server = cast(Connection, {"transport": "stdio", **tether.mcp_stdio(target["command"], target["args"], name="ledger")})
    tools = await MultiServerMCPClient({"ledger": server}).get_tools()
    model = ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0)
    agent = create_deep_agent(model=model, tools=tools, system_prompt="Charge customers with your tools.")
    return await run_agent(prompt, agent=agent, **run_args)
