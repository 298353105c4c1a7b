"""Conformance kit for the OpenAI Agents SDK adapter (see tests/conformance/conftest.py)."""

from __future__ import annotations

FRAMEWORK = "openai"
MODEL = "gpt-4o-mini"
PROTOCOL = "openai-responses"

MULTI_PROMPT = "delegate: ask the weather agent about Paris"

#: The triage agent hands off at once; the weather agent (seeing the whole conversation, one
#: tool-calling turn in) then calls a tool and answers.
MULTI_SCRIPT = [
    {
        "match": "delegate:",
        "turns": [
            {"tool_calls": [{"name": "transfer_to_weather_agent", "arguments": {}}]},
            {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
            {"text_from_tool_results": True, "text": "Weather agent:"},
        ],
    }
]


def multi_agent(tools: list) -> object:
    """A triage agent that hands off to a weather agent holding the tools (model names only:
    the adapter's RunConfig routes both agents through the seam)."""
    from agents import Agent

    from tether_openai import function_tool

    weather = Agent(
        name="weather_agent", instructions="Answer weather questions with your tools.", model=MODEL, tools=[function_tool(t) for t in tools]
    )
    return Agent(name="triage", instructions="Hand weather questions to the weather agent.", model=MODEL, handoffs=[weather])
