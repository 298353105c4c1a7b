"""The MCP scenario's agent for Hermes (tests/support/mcp_scenario.py): Hermes' own MCP client
(``tools.mcp_tool``, its ``mcp_servers`` config) pointed at Tether in one line each, through
``HermesAgent(mcp_servers=...)``. Hermes offers the server's tools as ``mcp__ledger__<tool>`` in
toolset ``mcp-ledger``."""

from __future__ import annotations

from typing import Any

import tether
from tether_hermes import HermesAgent, run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    from run_agent import AIAgent

    # Built before the run (as an agent module's would be): the URL follows the active run.
    if "url" in target:
        server: dict[str, Any] = {"url": tether.mcp_url(target["url"], name="ledger")}
    else:
        server = tether.mcp_stdio(target["command"], target["args"], name="ledger")

    def cashier(**tether_args: str) -> AIAgent:
        return AIAgent(
            model="gpt-4o-mini",
            enabled_toolsets=["mcp-ledger"],
            quiet_mode=True,
            skip_context_files=True,
            skip_memory=True,
            **tether_args,
        )

    agent = HermesAgent(cashier, mcp_servers={"ledger": server})
    return await run_agent(prompt, agent=agent, **run_args)
