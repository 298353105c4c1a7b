"""Tether for LangChain: durable ``langchain.agents.create_agent`` runs.

    from tether_langchain import run_agent, tool

    @tool
    def get_weather(city: str) -> str: ...

    result = await run_agent("Weather in Paris?", model="gpt-4o-mini", tools=[get_weather])
    result = await run_agent("...", agent="myapp.agents:agent")   # bring your own agent

LangChain runs the loop (the agent graph, tool calling, middleware); Tether journals every model
request at the wire (``ChatOpenAI`` over the seam's httpx transport) and every tool call at the
tool seam, and keeps ``memory_key`` as the agent's message history (:class:`MessageHistory`).
"""

try:
    import langchain.agents as _agents  # noqa: F401
    import langchain_openai as _openai  # noqa: F401
except ImportError as e:  # pragma: no cover - the guard users see
    raise ImportError("tether_langchain needs LangChain and langchain-openai: pip install tether-langchain") from e

from tether.agent import Tool, bind, tool

from .adapter import LangChainAdapter, answer_text, chat_model, langchain_tool, openai_base_url, routed_env, tool_errors
from .memory import MessageHistory

ADAPTER = LangChainAdapter()
run_agent, run_agent_sync = bind(ADAPTER)

__all__ = [
    "ADAPTER",
    "LangChainAdapter",
    "MessageHistory",
    "Tool",
    "answer_text",
    "chat_model",
    "langchain_tool",
    "openai_base_url",
    "routed_env",
    "run_agent",
    "run_agent_sync",
    "tool",
    "tool_errors",
]
