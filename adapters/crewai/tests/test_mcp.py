"""CrewAI's own MCP client (an agent's ``mcps``) through Tether is refused with a clear reason
(README.md, "MCP servers"): CrewAI names each MCP tool after the server's URL or command line,
which through Tether holds the proxy's port and token, new every attempt, so the model turns that
offer the tool could never replay. mcp_agents.py is the crew a user would write."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mcp_scenario import PROMPT
from tether.errors import ConfigError

AGENTS = Path(__file__).with_name("mcp_agents.py")


@pytest.mark.parametrize(
    "target", [{"url": "http://127.0.0.1:9/mcp"}, {"command": "ledger-server", "args": ["--stdio"]}], ids=["http", "stdio"]
)
async def test_mcps_through_tether_are_refused_before_any_call(tmp_path: Path, target: dict) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("crewai_mcp_agents", AGENTS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ConfigError, match="mcps through Tether .* are not supported: CrewAI names each MCP tool"):
        await module.run(
            target, PROMPT, run_id="crew-mcp", store=str(tmp_path / "store"), upstreams={"openai": "http://127.0.0.1:9/openai"}
        )
    assert not (tmp_path / "store" / "journal" / "crew-mcp" / "model").exists()  # refused before any model turn
