"""The Pydantic AI kit for the shared conformance suite (tests/conformance).

TETHER_KIT=adapters/pydantic-ai/tests/kit.py python -m pytest tests/conformance
"""

from __future__ import annotations

from pydantic_ai import Agent, RunContext

from tether_pydantic_ai import pydantic_tool

FRAMEWORK = "pydantic-ai"
MODEL = "gpt-4o-mini"
#: ``openai:`` models in Pydantic AI speak the Responses API (``openai-chat:`` is Chat Completions).
PROTOCOL = "openai-responses"

MULTI_PROMPT = "delegate: ask the weather agent about Paris"
#: The coordinator delegates once, then answers with what the weather agent said; the weather
#: agent (first message "What is the weather in Paris?") gets the shared catch-all conversation:
#: get_weather, then an answer quoting it.
MULTI_SCRIPT = [
    {
        "match": "delegate:",
        "turns": [
            {"tool_calls": [{"name": "ask_weather_agent", "arguments": {"question": "What is the weather in Paris?"}}]},
            {"text_from_tool_results": True, "text": "The weather agent says:"},
        ],
    }
]


def multi_agent(tools: list) -> Agent:
    """Agent delegation as Pydantic AI documents it: a tool of the coordinator runs the weather
    agent with the coordinator's usage (``usage=ctx.usage``). Both agents are plain
    ``openai:`` agents built from a model name, as user code builds them."""
    by_name = {t.name: t for t in tools}
    weather = Agent(
        f"openai:{MODEL}",
        name="weather",
        instructions="You answer questions about the weather.",
        tools=[pydantic_tool(by_name["get_weather"])],
    )

    async def ask_weather_agent(ctx: RunContext[None], question: str) -> str:
        """Ask the weather agent a question about the weather."""
        result = await weather.run(question, usage=ctx.usage)
        return result.output

    return Agent(
        f"openai:{MODEL}",
        name="coordinator",
        instructions="You delegate weather questions to the weather agent.",
        tools=[ask_weather_agent],
    )
