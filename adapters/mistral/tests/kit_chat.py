"""Conformance kit for the Mistral adapter, chat completions (see tests/conformance/conftest.py).

TETHER_KIT=adapters/mistral/tests/kit_chat.py python -m pytest tests/conformance
"""

from __future__ import annotations

FRAMEWORK = "mistral"
MODEL = "mistral-chat:mistral-small-latest"
PROTOCOL = "mistral-chat"

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
    # The same agents on chat completions (kit.py runs them on conversations).
    weather = MistralAgent(
        api="chat",
        name="weather",
        model="mistral-small-latest",
        description="Answers questions about the weather.",
        instructions="You answer questions about the weather.",
        tools=[by_name["get_weather"]],
    )
    return MistralAgent(
        api="chat",
        name="coordinator",
        model="mistral-small-latest",
        instructions="You delegate weather questions to the weather agent.",
        agents=[weather],
    )
