"""Conformance kit for the Google ADK adapter (see tests/conformance/conftest.py).

TETHER_KIT=adapters/google-adk/tests/kit.py python -m pytest tests/conformance
"""

from __future__ import annotations

FRAMEWORK = "google-adk"
MODEL = "gemini-2.5-flash"
PROTOCOL = "gemini"

MULTI_PROMPT = "delegate: ask the weather agent about Paris"

#: The coordinator calls the weather agent as a tool (ADK's ``AgentTool``); the weather agent
#: (first message "What is the weather in Paris?") gets the shared catch-all conversation:
#: get_weather, then an answer quoting it. Transfers and sequential/parallel trees are tested in
#: test_google_adk.py (ADK shows a transferred-to agent the others' turns as quoted user text, which
#: a script keyed by tool-calling turns cannot follow within one conversation).
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
    """A coordinator that asks a weather agent holding the tools, as ADK documents agents as tools
    (model names only: the adapter routes both agents through the seam)."""
    from google.adk.agents import LlmAgent
    from google.adk.tools.agent_tool import AgentTool

    from tether_google_adk import adk_tool

    by_name = {t.name: t for t in tools}
    weather = LlmAgent(
        name="weather",
        model=MODEL,
        description="Answers questions about the weather.",
        instruction="You answer questions about the weather.",
        tools=[adk_tool(by_name["get_weather"])],
    )
    return LlmAgent(
        name="coordinator",
        model=MODEL,
        instruction="You delegate weather questions to the weather agent.",
        tools=[AgentTool(agent=weather)],
    )
