"""The MCP scenario's agent for Mistral (tests/support/mcp_scenario.py): the SDK's own MCP clients,
``mistralai.extra.mcp``'s ``MCPClientStreamableHTTP`` and ``MCPClientSTDIO``, registered on the
run's ``RunContext`` through ``MistralAgent(mcp_clients=...)``, pointed at Tether in one line each."""

from __future__ import annotations

from typing import Any

from mcp import StdioServerParameters
from mistralai.extra.mcp.stdio import MCPClientSTDIO
from mistralai.extra.mcp.streamable_http import MCPClientStreamableHTTP, StreamableHTTPServerParams

import tether
from tether_mistral import MistralAgent, run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    client: Any
    if "url" in target:
        client = MCPClientStreamableHTTP(StreamableHTTPServerParams(url=tether.mcp_url(target["url"], name="ledger")), name="ledger")
    else:
        client = MCPClientSTDIO(StdioServerParameters(**tether.mcp_stdio(target["command"], target["args"], name="ledger")), name="ledger")
    agent = MistralAgent(model="mistral-small-latest", instructions="Charge customers with your tools.", mcp_clients=[client])
    return await run_agent(prompt, agent=agent, **run_args)
