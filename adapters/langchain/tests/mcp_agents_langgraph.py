"""The MCP scenario's agent for LangGraph (tests/support/mcp_scenario.py), in the LangChain env where
``langchain-mcp-adapters`` is installed: a hand-built graph (agent ⇄ ``ToolNode``) whose tools come
from ``MultiServerMCPClient``, run by the LangGraph adapter."""

from __future__ import annotations

from typing import Any, cast

from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.sessions import Connection
from langchain_openai import ChatOpenAI
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import tether
from tether_langgraph import openai_base_url, run_agent


async def run(target: dict[str, Any], prompt: str, **run_args: Any) -> Any:
    if "url" in target:
        server: Connection = {"transport": "streamable_http", "url": tether.mcp_url(target["url"], name="ledger")}
    else:
        server = cast(Connection, {"transport": "stdio", **tether.mcp_stdio(target["command"], target["args"], name="ledger")})
    tools = await MultiServerMCPClient({"ledger": server}).get_tools()
    model = ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0).bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return await run_agent(prompt, agent=graph.compile(), **run_args)
