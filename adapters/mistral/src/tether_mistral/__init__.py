"""Tether for Mistral: durable chat completions and Conversations-API agents, tools, memory, approvals.

from tether_mistral import MistralAgent, run_agent, tool

@tool
def get_weather(city: str) -> str: ...

result = await run_agent("Weather in Paris?", model="mistral-small-latest", tools=[get_weather])        # conversations
result = await run_agent("Weather in Paris?", model="mistral-chat:mistral-small-latest", tools=[get_weather])  # chat
result = await run_agent("Weather in Paris?", agent=MistralAgent(model="mistral-small-latest", agents=[...]))
"""

from tether.adapter_package import Tool as Tool
from tether.adapter_package import package, requires
from tether.adapter_package import tool as tool

requires("tether-mistral", "the Mistral SDK (mistralai[agents])", "mistralai.client")

from .adapter import MistralAdapter as MistralAdapter
from .adapter import MistralAgent as MistralAgent
from .adapter import tool_schema as tool_schema
from .memory import Transcript as Transcript

ADAPTER, run_agent, run_agent_sync = package(MistralAdapter())
