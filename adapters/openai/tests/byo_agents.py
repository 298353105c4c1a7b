"""Bring-your-own agents for the adapter tests, imported by path ("byo_agents:triage")."""

from __future__ import annotations

import os

from agents import Agent, function_tool


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city (a plain SDK tool: not journaled by Tether)."""
    return f"The weather in {city} is sunny."


weather = Agent(name="weather_agent", instructions="Answer weather questions.", model="gpt-4o-mini", tools=[get_weather])

#: A handoff: triage → weather_agent.
triage = Agent(name="triage", instructions="Hand weather questions over.", model="gpt-4o-mini", handoffs=[weather])

#: A sub-agent as a tool: the nested Runner inherits the RunConfig (and so the seam).
manager = Agent(
    name="manager",
    instructions="Ask the weather agent.",
    model="gpt-4o-mini",
    tools=[weather.as_tool(tool_name="ask_weather_agent", tool_description="Ask the weather agent.")],
)


def make_agent() -> Agent:
    """A factory: the adapter calls it."""
    return Agent(name="made", instructions="Be brief.", model="gpt-4o-mini")


def own_client_agent() -> Agent:
    """An agent whose model object carries its own client, pointed by the test at the fake provider."""
    from agents import OpenAIResponsesModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=os.environ["BYO_OPENAI_BASE_URL"], api_key="sk-own", max_retries=0)
    return Agent(name="own", instructions="Be brief.", model=OpenAIResponsesModel("gpt-4o-mini", openai_client=client), tools=[get_weather])
