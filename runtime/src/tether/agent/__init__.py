"""The adapter contract and the Python API every ``tether_<framework>`` package exposes.

An adapter is small: it turns an :class:`AgentSpec` into the framework's idiomatic agent
(declarative) or takes the user's own agent (bring your own), points the framework's model
clients at the wire seam, presents :class:`Tool` objects as framework tools, maps memory onto
the framework's own notion, and runs the framework's own runner — never a loop of ours.

    class Adapter:                       # one per framework, same shape in each package
        framework = "openai"
        providers = ("openai",)          # what its declarative agents speak (empty: any)
        def build(spec, session)         # declarative agent from model + instructions + tools
        def load(import_path)            # bring your own: "myapp.agents:agent" (default: import it)
        async def run(agent, prompt, session) -> str   # the framework's runner; returns the answer

Everything else — scope, store, journal, proxy, memory commit, approvals, progress, cost,
the Flyte report — is done once, here, by :func:`run_agent`. One module a job:

    tool_object   Tool, @tool: a function or Flyte task as a tool of every framework
    adapter       Adapter (the base above), AgentSpec, AgentSession, MemoryItems (memory as the
                  framework's own list of objects)
    runner        run_agent, run_agent_sync, bind (what each adapter package re-exports); AgentJob,
                  run_job (the same run, typed: the entrypoint's AgentRun spec)
    result        AgentResult
    report        the run's timeline in the Flyte report
    loading       load_adapter: the installed adapter of a framework id
    in_flyte      whether Flyte is here (a task object, a task context), without importing it

Adapters and users import from here (``tether.agent``) or ``tether``.
"""

from __future__ import annotations

from ..run import current_run
from .adapter import Adapter, AgentSession, AgentSpec, MemoryItems
from .loading import load_adapter
from .result import AgentResult
from .runner import bind, run_agent, run_agent_sync
from .tool_object import Tool, as_tools, tool, tool_error_text

__all__ = [
    "Adapter",
    "AgentResult",
    "AgentSession",
    "AgentSpec",
    "MemoryItems",
    "Tool",
    "as_tools",
    "bind",
    "current_run",
    "load_adapter",
    "run_agent",
    "run_agent_sync",
    "tool",
    "tool_error_text",
]
