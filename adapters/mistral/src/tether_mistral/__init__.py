"""Tether for Mistral: durable chat completions and Conversations-API agents, tools, memory, approvals.

from tether_mistral import MistralAgent, run_agent, tool

@tool
def get_weather(city: str) -> str: ...

result = await run_agent("Weather in Paris?", model="mistral-small-latest", tools=[get_weather])        # conversations
result = await run_agent("Weather in Paris?", model="mistral-chat:mistral-small-latest", tools=[get_weather])  # chat
result = await run_agent("Weather in Paris?", agent=MistralAgent(model="mistral-small-latest", agents=[...]))
"""

try:
    import mistralai.client  # noqa: F401
except ImportError as e:  # pragma: no cover - the import guard names what to install
    raise ImportError("tether-mistral needs the Mistral SDK: pip install 'tether-mistral' (mistralai[agents])") from e

from tether.agent import Tool, bind, tool

from .adapter import MistralAdapter, MistralAgent, tool_schema
from .memory import Transcript

ADAPTER = MistralAdapter()
run_agent, run_agent_sync = bind(ADAPTER)

__all__ = ["ADAPTER", "MistralAdapter", "MistralAgent", "Tool", "Transcript", "run_agent", "run_agent_sync", "tool", "tool_schema"]
