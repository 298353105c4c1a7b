"""Conformance kit for the Hermes Agent adapter (see tests/conformance/conftest.py).

TETHER_KIT=adapters/hermes/tests/kit.py python -m pytest tests/conformance
"""

from __future__ import annotations

FRAMEWORK = "hermes"
MODEL = "gpt-4o-mini"
PROTOCOL = "openai-chat"
#: Hermes runs concurrently only tools it knows to be read-only; others (Tether tools) one after the other.
PARALLEL_TOOL_CALLS = False

MULTI_PROMPT = "delegate: ask the weather agent about Paris"

#: The coordinator delegates with Hermes' own ``delegate_task``; the sub-agent (first message:
#: the goal, "What is the weather in Paris?") gets the shared catch-all conversation:
#: get_weather, then an answer quoting it.
MULTI_SCRIPT = [
    {
        "match": "delegate:",
        "turns": [
            {"tool_calls": [{"name": "delegate_task", "arguments": {"goal": "What is the weather in Paris?"}}]},
            {"text_from_tool_results": True, "text": "The weather agent says:"},
        ],
    }
]


def multi_agent(tools: list) -> object:
    """A coordinator that may delegate (Hermes' ``delegation`` toolset); its sub-agents inherit
    its endpoint and its Tether tools, as Hermes' ``delegate_task`` builds them."""
    from run_agent import AIAgent

    from tether_hermes import TOOLSET, HermesAgent

    def coordinator(**tether: str) -> AIAgent:
        return AIAgent(
            model=MODEL,
            enabled_toolsets=["delegation", TOOLSET],
            quiet_mode=True,
            skip_context_files=True,
            skip_memory=True,
            **tether,
        )

    return HermesAgent(coordinator, tools=[t for t in tools if t.name == "get_weather"])
