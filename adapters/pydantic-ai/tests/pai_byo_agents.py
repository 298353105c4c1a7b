"""Bring-your-own Pydantic AI agents, built the way user code builds them: at import, from model
names, with no idea Tether exists (the tests import them as ``pai_byo_agents:<name>``)."""

from __future__ import annotations

from pydantic_ai import Agent, RunContext

from tether import tool
from tether_pydantic_ai import pydantic_tool


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"The weather in {city} is sunny, 21 C."


#: ``openai:`` is the Responses API.
agent = Agent("openai:gpt-4o-mini", instructions="Be brief.", tools=[pydantic_tool(get_weather)])

#: ``openai-chat:`` is Chat Completions.
chat_agent = Agent("openai-chat:gpt-4o-mini", instructions="Be brief.", tools=[pydantic_tool(get_weather)])

#: Delegation: the coordinator's tool runs a module-level agent.
weather_agent = Agent("anthropic:claude-sonnet-4-5", instructions="You know the weather.", tools=[pydantic_tool(get_weather)])


async def ask_weather_agent(ctx: RunContext[None], question: str) -> str:
    """Ask the weather agent."""
    return (await weather_agent.run(question, usage=ctx.usage)).output


coordinator = Agent("openai:gpt-4o-mini", instructions="Delegate weather questions.", tools=[ask_weather_agent])


def make_agent() -> Agent:
    """A factory: the import path may name one."""
    return Agent("mistral:mistral-small-latest", tools=[pydantic_tool(get_weather)])
