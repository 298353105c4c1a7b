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

from tether.adapter_package import Tool, package, requires, tool

requires("tether-deepagents", "Deep Agents and langchain-openai", "deepagents", "langchain_openai")


from .adapter import DeepAgentsAdapter, TetherCheckpointer, answer_text, chat_model, langchain_tool, openai_base_url, routed_env

ADAPTER, run_agent, run_agent_sync = package(DeepAgentsAdapter())

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
