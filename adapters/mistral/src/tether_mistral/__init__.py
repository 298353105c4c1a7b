"""Tether for Mistral: durable chat completions and Conversations-API agents, tools, memory, approvals.

from tether_mistral import MistralAgent, run_agent, tool

@tool
def get_weather(city: str) -> str: ...

result = await run_agent("Weather in Paris?", model="mistral-small-latest", tools=[get_weather])        # conversations
result = await run_agent("Weather in Paris?", model="mistral-chat:mistral-small-latest", tools=[get_weather])  # chat
result = await run_agent("Weather in Paris?", agent=MistralAgent(model="mistral-small-latest", agents=[...]))
"""

from tether.adapter_package import Tool, package, requires, tool

requires("tether-mistral", "the Mistral SDK (mistralai[agents])", "mistralai.client")

from .adapter import MistralAdapter, MistralAgent, tool_schema
from .memory import Transcript

ADAPTER, run_agent, run_agent_sync = package(MistralAdapter())

__all__ = ["ADAPTER", "MistralAdapter", "MistralAgent", "Tool", "Transcript", "run_agent", "run_agent_sync", "tool", "tool_schema"]
