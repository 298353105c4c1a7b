"""Conformance kit for the Mistral adapter, Conversations API (see tests/conformance/conftest.py).

TETHER_KIT=adapters/mistral/tests/kit.py python -m pytest tests/conformance
"""

from __future__ import annotations

FRAMEWORK = "mistral"
MODEL = "mistral-small-latest"
PROTOCOL = "mistral-conversations"
#: The SDK's Conversations loop (``run_async``) runs a turn's function calls one after the other.
PARALLEL_TOOL_CALLS = False

MULTI_PROMPT = "delegate: ask the weather agent about Paris"

#: The coordinator delegates to the weather agent (offered to it as a function); the weather agent
#: (first message "What is the weather in Paris?") gets the shared catch-all conversation:
#: get_weather, then an answer quoting it.
MULTI_SCRIPT = [
    {
        "match": "delegate:",
        "turns": [
            {"tool_calls": [{"name": "weather", "arguments": {"request": "What is the weather in Paris?"}}]},
            {"text_from_tool_results": True, "text": "The weather agent says:"},
        ],
    }
]


def multi_agent(tools: list) -> object:
    """A coordinator that delegates to a weather agent holding the tools."""
    from tether_mistral import MistralAgent

    by_name = {t.name: t for t in tools}
    weather = MistralAgent(
        name="weather",
        model=MODEL,
        description="Answers questions about the weather.",
        instructions="You answer questions about the weather.",
        tools=[by_name["get_weather"]],
    )
    return MistralAgent(
        name="coordinator", model=MODEL, instructions="You delegate weather questions to the weather agent.", agents=[weather]
    )
