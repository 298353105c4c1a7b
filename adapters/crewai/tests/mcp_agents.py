"""The MCP scenario's crew for CrewAI (tests/support/mcp_scenario.py): CrewAI's own MCP client (an
agent's ``mcps``: ``MCPServerHTTP`` / ``MCPServerStdio``), pointed at Tether in one line each."""

from __future__ import annotations

from typing import Any

from crewai import Agent, Crew, Task
from crewai.mcp import MCPServerHTTP, MCPServerStdio

import tether
from tether_crewai import run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    server: MCPServerHTTP | MCPServerStdio
    if "url" in target:
        server = MCPServerHTTP(url=tether.mcp_url(target["url"], name="ledger"))
    else:
        server = MCPServerStdio(**tether.mcp_stdio(target["command"], target["args"], name="ledger"))

    def crew() -> Crew:
        cashier = Agent(
            role="cashier", goal="Charge customers.", backstory="You charge customers with your tools.", llm="gpt-4o-mini", mcps=[server]
        )
        return Crew(agents=[cashier], tasks=[Task(description="{input}", expected_output="What was charged.", agent=cashier)])

    return await run_agent(prompt, agent=crew(), **run_args)
