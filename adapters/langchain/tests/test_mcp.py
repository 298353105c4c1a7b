"""The LangChain family's MCP client (langchain-mcp-adapters) through Tether (README.md, "MCP
servers"), under the LangChain adapter (``create_agent``) and the LangGraph adapter (a hand-built
graph): killed right after the MCP tool's side effect, the retry runs the tool 0 more times and asks
the model only for the turn that never finished (tests/support/mcp_scenario.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mcp_scenario import kill_after_the_mcp_tool_then_resume

HERE = Path(__file__).parent


@pytest.mark.parametrize("transport", ["http", "stdio"])
@pytest.mark.parametrize("agents", ["mcp_agents.py", "mcp_agents_langgraph.py"], ids=["langchain", "langgraph"])
def test_kill_after_an_mcp_tool_then_resume(tmp_path: Path, transport: str, agents: str) -> None:
    kill_after_the_mcp_tool_then_resume(tmp_path, HERE / agents, transport)


def test_kill_after_an_mcp_tool_then_resume_in_process(tmp_path: Path) -> None:
    """``tether.mcp_http_client`` under ``mcp`` 1.x (this family's): an ``httpx`` client."""
    kill_after_the_mcp_tool_then_resume(tmp_path, HERE / "mcp_agents.py", "http-in-process")
