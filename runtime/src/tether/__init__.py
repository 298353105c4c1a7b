"""Tether: durable runtime for AI agents.

The public surface; everything else is reached through its module (``tether.stores``,
``tether.wire``, ``tether.testing``...). Framework packages (``tether_openai``…) re-export
``tool``, ``run_agent`` and ``run_agent_sync`` bound to their adapter.

``tether.testing`` (the fake providers) is its own distribution, ``tether-testing`` (testing/ in a
checkout): the package path is extended so it is found in another install location as well.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)


from .agent import Adapter, AgentResult, AgentSession, AgentSpec, Tool, load_adapter, run_agent, run_agent_sync, tool
from .errors import ConfigError, StoreAccessDenied, StoreError, StoreUnavailable, Suspended, TetherError, ToolError
from .mcp import mcp_http_client, mcp_stdio, mcp_url
from .secrets import secret
from .tools import idempotency_key

__all__ = [
    "Adapter",
    "AgentResult",
    "AgentSession",
    "AgentSpec",
    "ConfigError",
    "StoreAccessDenied",
    "StoreError",
    "StoreUnavailable",
    "Suspended",
    "TetherError",
    "Tool",
    "ToolError",
    "idempotency_key",
    "load_adapter",
    "mcp_http_client",
    "mcp_stdio",
    "mcp_url",
    "run_agent",
    "run_agent_sync",
    "secret",
    "tool",
]
