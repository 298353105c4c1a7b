"""Hermes' own MCP client (``mcp_servers``, ``tools.mcp_tool``) through Tether (README.md, "MCP
servers"): killed right after the MCP tool's side effect, the retry runs the tool 0 more times and
asks the model only for the turn that never finished (tests/support/mcp_scenario.py); a
destructive tool waits for a human before the server hears it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mcp_scenario import approve_the_destructive_mcp_tool_then_resume, kill_after_the_mcp_tool_then_resume

AGENTS = Path(__file__).with_name("mcp_agents.py")


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_kill_after_an_mcp_tool_then_resume(tmp_path: Path, transport: str) -> None:
    kill_after_the_mcp_tool_then_resume(tmp_path, AGENTS, transport, tool="mcp__ledger__charge")


def test_a_destructive_mcp_tool_waits_for_approval(tmp_path: Path) -> None:
    approve_the_destructive_mcp_tool_then_resume(tmp_path, AGENTS, "http", approve=True, tool="mcp__ledger__void")
