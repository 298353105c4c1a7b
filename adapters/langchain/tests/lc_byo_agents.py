"""Bring-your-own agents for the adapter tests, imported by path ("lc_byo_agents:agent").

Written as a user would: ``ChatOpenAI`` built at import with no base URL (so it reads
``OPENAI_BASE_URL``, which the adapter points at its proxy while importing).
"""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from tether import tool
from tether_langchain import langchain_tool


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"The weather in {city} is sunny."


def _agent(**kwargs):
    return create_agent(
        ChatOpenAI(model="gpt-4o-mini", max_retries=0), tools=[langchain_tool(get_weather)], system_prompt="Be brief.", **kwargs
    )


agent = _agent()

#: Compiled with the user's own checkpointer: the adapter gives it a fresh thread per attempt.
with_saver = _agent(checkpointer=InMemorySaver())


def make_agent():
    """A factory: the adapter calls it (inside the routed environment)."""
    return _agent()
