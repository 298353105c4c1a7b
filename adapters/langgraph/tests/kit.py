"""The LangGraph adapter's conformance kit (see tests/conformance/conftest.py).

The multi-agent scenario is a LangGraph multi-agent graph with a handoff: a ``supervisor`` agent
node whose only tool, ``transfer_to_weather_agent``, returns ``Command(goto="weather_agent")``,
and a ``weather_agent`` node with the Tether tools and its own ``ToolNode`` loop. Both models are
built before the run exists, so they point at the loopback proxy's ``/r/active/openai/v1``
(:func:`tether_langgraph.openai_base_url`).
"""

from __future__ import annotations

from typing import Annotated

from langchain_core.messages import SystemMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from tests.support.langchain_family import model
from tether_langgraph import langchain_tool, tool_node

FRAMEWORK = "langgraph"
MODEL = "gpt-4o-mini"
PROTOCOL = "openai-chat"

MULTI_PROMPT = "delegate: ask the weather agent about Paris"
#: One conversation across both agents (they share the message list): the supervisor hands
#: off, the weather agent calls a tool, then answers with its result.
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


@tool("transfer_to_weather_agent", description="Hand the conversation over to the weather agent.")
def transfer_to_weather_agent(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
    return Command(goto="weather_agent", update={"messages": [ToolMessage("Transferred to the weather agent.", tool_call_id=tool_call_id)]})


def multi_agent(tools: list) -> object:
    supervisor_model = model().bind_tools([transfer_to_weather_agent])
    weather_tools = [langchain_tool(t) for t in tools]
    weather_model = model().bind_tools(weather_tools)

    async def supervisor(state: MessagesState) -> dict:
        system = SystemMessage("You route weather questions to the weather agent.")
        return {"messages": [await supervisor_model.ainvoke([system, *state["messages"]])]}

    async def weather_agent(state: MessagesState) -> dict:
        system = SystemMessage("You answer questions about the weather.")
        return {"messages": [await weather_model.ainvoke([system, *state["messages"]])]}

    builder = StateGraph(MessagesState)
    builder.add_node("supervisor", supervisor)
    builder.add_node("handoff", ToolNode([transfer_to_weather_agent]), destinations=("weather_agent",))
    builder.add_node("weather_agent", weather_agent)
    builder.add_node("weather_tools", tool_node(weather_tools))
    builder.add_edge(START, "supervisor")
    builder.add_conditional_edges("supervisor", tools_condition, {"tools": "handoff", END: END})
    builder.add_conditional_edges("weather_agent", tools_condition, {"tools": "weather_tools", END: END})
    builder.add_edge("weather_tools", "weather_agent")
    return builder.compile(name="weather_desk")
