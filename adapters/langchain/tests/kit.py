"""The LangChain adapter's conformance kit (see tests/conformance/conftest.py).

The multi-agent scenario is LangChain's sub-agent pattern: a supervisor agent whose tool asks a
weather agent (a second ``create_agent`` graph) and returns its answer. Both agents' ``ChatOpenAI``
are built before the run exists, so they point at the loopback proxy's ``/r/active/openai/v1``
(:func:`tether_langchain.openai_base_url`); the weather agent's tools are the Tether tools.
"""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import StructuredTool

from tests.support.langchain_family import model
from tether_langchain import answer_text, langchain_tool, tool_errors

FRAMEWORK = "langchain"
MODEL = "gpt-4o-mini"
PROTOCOL = "openai-chat"

MULTI_PROMPT = "delegate: ask the weather agent about Paris"
#: The supervisor asks the weather agent once, then answers with what it said. The weather
#: agent's first message matches the shared catch-all conversation (a tool call, then an answer).
MULTI_SCRIPT = [
    {
        "match": "delegate:",
        "turns": [
            {"tool_calls": [{"name": "ask_weather_agent", "arguments": {"question": "weather agent: how is the weather in Paris?"}}]},
            {"text_from_tool_results": True, "text": "Supervisor:"},
        ],
    }
]


def multi_agent(tools: list) -> object:
    weather_agent = create_agent(
        model(),
        tools=[langchain_tool(t) for t in tools],
        system_prompt="You answer questions about the weather.",
        middleware=[tool_errors()],
        name="weather_agent",
    )

    async def ask_weather_agent(question: str) -> str:
        """Ask the weather agent a question and return its answer."""
        result = await weather_agent.ainvoke({"messages": [HumanMessage(question)]})
        return answer_text(result["messages"])

    return create_agent(
        model(),
        tools=[StructuredTool.from_function(coroutine=ask_weather_agent, name="ask_weather_agent")],
        system_prompt="You delegate weather questions to the weather agent.",
        name="supervisor",
    )
