"""Google ADK's own MCP client (MCPToolset) through Tether (README.md, "MCP servers"): killed right
after the MCP tool's side effect, the retry runs the tool 0 more times and asks the model only
for the turn that never finished (tests/support/mcp_scenario.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mcp_scenario import kill_after_the_mcp_tool_then_resume

AGENTS = Path(__file__).with_name("mcp_agents.py")


@pytest.mark.parametrize("transport", ["http", "http-in-process", "stdio"])
def test_kill_after_an_mcp_tool_then_resume(tmp_path: Path, transport: str) -> None:
    kill_after_the_mcp_tool_then_resume(tmp_path, AGENTS, transport)
