"""The LangGraph adapter: compiled graphs run by LangGraph's own Pregel loop, durably.

Declarative: the graph a LangGraph user writes by hand — ``StateGraph(MessagesState)`` with an
``agent`` node calling ``ChatOpenAI(...).bind_tools(tools)``, a prebuilt ``ToolNode`` and
``tools_condition`` routing between them. (``langgraph.prebuilt.create_react_agent`` still exists
in 1.2 but is deprecated in favour of ``langchain.agents.create_agent``, which lives in another
distribution — the LangChain adapter's; the explicit graph needs only LangGraph, shows its shape,
and lets the adapter set ``ToolNode``'s own ``handle_tool_errors``.) The model is a ``ChatOpenAI``
whose httpx clients are the wire seam's in-process transports and whose ``base_url`` is the run's
upstream: the Chat Completions body is what gets fingerprinted, never LangChain message ids,
checkpoint ids or timestamps. Tools are ``StructuredTool.from_function(coroutine=tool.as_function(
errors="raise"))``; a terminal failure reaches the model as ``ToolNode``'s error ``ToolMessage``.

Bring your own: a compiled graph (``Pregel``) taking ``{"messages": [...]}``, or
``"pkg.mod:graph"`` (a factory function is called). Its ``ChatOpenAI`` was built by the user, so
while the module is imported (and the factory called) ``OPENAI_BASE_URL``/``OPENAI_API_BASE``
point at the loopback proxy's ``/r/active/openai/v1``, then are restored; the run registers with
the proxy so that URL reaches its seam. Objects built before the run: see the README.

Memory: :class:`~tether_langgraph.memory.TetherCheckpointer`, ``thread_id`` = the memory key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from tether.agent import AgentSession, AgentSpec, tool_error_text
from tether.errors import ToolError

# Routing, the model client, tool wrapping and running a graph with memory are the family's.
from .family import CheckpointedGraphAdapter, TetherCheckpointer, chat_model, langchain_tool


def on_tool_error(error: ToolError) -> str:
    """``ToolNode(handle_tool_errors=on_tool_error)``: a terminal tool failure becomes an error
    ``ToolMessage`` the model sees. ``ToolNode`` reads the annotation: other exceptions propagate."""
    return tool_error_text(error)


def tool_node(tools: Sequence[BaseTool], **kwargs: Any) -> ToolNode:
    """LangGraph's ``ToolNode`` with Tether's tool errors handed to the model."""
    return ToolNode(list(tools), **{"handle_tool_errors": on_tool_error, **kwargs})


def agent_graph(
    model: Any,
    tools: Sequence[BaseTool] = (),
    *,
    instructions: str | None = None,
    name: str = "agent",
    checkpointer: Any = None,
) -> Any:
    """The tool-calling agent graph: ``agent`` ⇄ ``tools`` until the model answers."""
    bound = model.bind_tools(list(tools)) if tools else model
    system = [SystemMessage(instructions)] if instructions else []

    async def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await bound.ainvoke([*system, *state["messages"]])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    if tools:
        builder.add_node("tools", tool_node(tools))
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
    else:
        builder.add_edge("agent", END)
    return builder.compile(checkpointer=checkpointer, name=name)


class LangGraphAdapter(CheckpointedGraphAdapter):
    """Compiled LangGraph graphs; memory is a checkpointer over the store (:class:`TetherCheckpointer`).
    Loading, routing and running are the family's (:mod:`tether_langgraph.family`); building is
    :func:`agent_graph`."""

    framework = "langgraph"

    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        graph = agent_graph(
            chat_model(spec.model, session),
            [langchain_tool(t) for t in spec.tools],
            instructions=spec.instructions,
            name=spec.name,
            checkpointer=TetherCheckpointer(session) if session.memory is not None else None,
        )
        self._built.add(graph)
        return graph
