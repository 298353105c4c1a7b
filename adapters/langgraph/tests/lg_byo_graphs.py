"""Bring-your-own graphs for the adapter tests, imported by path ("lg_byo_graphs:graph").

Written as a user would: ``ChatOpenAI`` built at import with no base URL (so it reads
``OPENAI_BASE_URL``, which the adapter points at its proxy while importing).
"""

from __future__ import annotations

from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from tether import tool
from tether_langgraph import langchain_tool


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"The weather in {city} is sunny."


def _graph(checkpointer=None):
    tools = [langchain_tool(get_weather)]
    model = ChatOpenAI(model="gpt-4o-mini", max_retries=0).bind_tools(tools)

    async def agent(state: MessagesState) -> dict:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


graph = _graph()

#: Compiled with the user's own in-memory checkpointer (Tether swaps in its own for the run).
with_saver = _graph(InMemorySaver())


def make_graph():
    """A factory: the adapter calls it (inside the routed environment)."""
    return _graph()
