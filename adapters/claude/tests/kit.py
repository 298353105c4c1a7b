"""Conformance kit for the Claude Agent SDK adapter (see tests/conformance/conftest.py).

TETHER_KIT=adapters/claude/tests/kit.py python -m pytest tests/conformance
"""

from __future__ import annotations

FRAMEWORK = "claude"
MODEL = "claude-sonnet-4-5"
PROTOCOL = "anthropic"
#: The Claude Code CLI runs MCP tool calls (Tether tools) one after the other.
PARALLEL_TOOL_CALLS = False

MULTI_PROMPT = "delegate: ask the weather agent about Paris"

#: The main agent hands the question to the ``weather`` subagent through the SDK's Agent (Task)
#: tool; the subagent (its own first message "What is the weather in Paris?") gets the shared
#: catch-all conversation: get_weather, then an answer quoting it.
MULTI_SCRIPT = [
    {
        "match": "delegate:",
        "turns": [
            {
                "tool_calls": [
                    {
                        "name": "Agent",
                        "arguments": {
                            "description": "Ask about the weather",
                            "prompt": "What is the weather in Paris?",
                            "subagent_type": "weather",
                        },
                    }
                ]
            },
            {"text_from_tool_results": True, "text": "The weather agent says:"},
        ],
    }
]


def multi_agent(tools: list) -> object:
    """Options with a ``weather`` subagent (the SDK's ``agents=``) that holds get_weather."""
    from claude_agent_sdk import AgentDefinition, ClaudeAgentOptions

    from tether_claude import ClaudeAgent, tool_name

    by_name = {t.name: t for t in tools}
    weather = AgentDefinition(
        description="Answers questions about the weather.",
        prompt="You answer questions about the weather.",
        tools=[tool_name(by_name["get_weather"])],
        model="inherit",
    )
    options = ClaudeAgentOptions(
        model=MODEL,
        system_prompt="You delegate weather questions to the weather agent.",
        agents={"weather": weather},
        tools=["Agent"],
        allowed_tools=["Agent", tool_name(by_name["get_weather"])],
    )
    return ClaudeAgent(options, [by_name["get_weather"]])
