"""The Deep Agents adapter's conformance kit (see tests/conformance/conftest.py).

The multi-agent scenario is Deep Agents' own: a deep agent whose ``task`` tool hands a job to a
``weather-agent`` sub-agent (a declarative ``SubAgent`` with the Tether tools). The sub-agent's
first message is the task description ("What is the weather in Paris?"), so it gets the shared
catch-all conversation: get_weather, then an answer quoting it. Both models are built before
the run exists, so they point at the loopback proxy's ``/r/active/openai/v1``
(:func:`tether_deepagents.openai_base_url`).
"""

from __future__ import annotations

from deepagents import SubAgent, create_deep_agent

from tests.support.langchain_family import model
from tether_deepagents import langchain_tool

FRAMEWORK = "deepagents"
MODEL = "gpt-4o-mini"
PROTOCOL = "openai-chat"

MULTI_PROMPT = "delegate: ask the weather agent about Paris"
#: The main agent calls ``task`` once, then answers with what the sub-agent returned.
MULTI_SCRIPT = [
    {
        "match": "delegate:",
        "turns": [
            {
                "tool_calls": [
                    {"name": "task", "arguments": {"description": "What is the weather in Paris?", "subagent_type": "weather-agent"}}
                ]
            },
            {"text_from_tool_results": True, "text": "The weather agent says:"},
        ],
    }
]


def multi_agent(tools: list) -> object:
    weather_agent: SubAgent = {
        "name": "weather-agent",
        "description": "Answers questions about the weather.",
        "system_prompt": "You answer questions about the weather.",
        "tools": [langchain_tool(t) for t in tools],
        "model": model(),
    }
    return create_deep_agent(
        model=model(),
        system_prompt="You delegate weather questions to the weather agent.",
        subagents=[weather_agent],
        name="weather_desk",
    )
