"""Tether for Deep Agents: durable ``deepagents.create_deep_agent`` runs.

    from tether_deepagents import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("...", agent="myapp.agents:agent")   # bring your own deep agent

Deep Agents runs the loop (planning, the virtual filesystem, sub-agents through ``task``);
Tether journals every model request at the wire (``ChatOpenAI`` over the seam's httpx transport),
every Tether tool call at the tool seam, and keeps ``memory_key`` as the graph's checkpointed
thread: transcript and virtual files (:class:`TetherCheckpointer`).
"""

try:
    import deepagents as _deepagents  # noqa: F401
    import langchain_openai as _openai  # noqa: F401
except ImportError as e:  # pragma: no cover - the guard users see
    raise ImportError("tether_deepagents needs Deep Agents and langchain-openai: pip install tether-deepagents") from e

from tether.agent import Tool, bind, tool
from tether_langgraph.memory import TetherCheckpointer

from .adapter import DeepAgentsAdapter, answer_text, chat_model, langchain_tool, openai_base_url, routed_env

ADAPTER = DeepAgentsAdapter()
run_agent, run_agent_sync = bind(ADAPTER)

__all__ = [
    "ADAPTER",
    "DeepAgentsAdapter",
    "TetherCheckpointer",
    "Tool",
    "answer_text",
    "chat_model",
    "langchain_tool",
    "openai_base_url",
    "routed_env",
    "run_agent",
    "run_agent_sync",
    "tool",
]
