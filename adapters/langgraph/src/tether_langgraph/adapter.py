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

import contextlib
import inspect
import os
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.pregel import Pregel

from tether.agent import Adapter, AgentSession, AgentSpec, Tool, current_run, tool_error_text
from tether.errors import ConfigError, ToolError

from .memory import TetherCheckpointer, without_delta_channels

#: Environment variables the OpenAI SDK (``OPENAI_BASE_URL``) and ``ChatOpenAI``
#: (``OPENAI_API_BASE``, read first) take their base URL from.
BASE_URL_ENV = ("OPENAI_BASE_URL", "OPENAI_API_BASE")


def openai_base_url() -> str:
    """The base URL (with ``/v1``) for a ``ChatOpenAI`` built before its run exists: the
    process's loopback proxy, which sends each request to the one run active at that time."""
    from tether.wire.proxy import shared_proxy

    return shared_proxy().active_url("openai") + "/v1"


@contextlib.contextmanager
def routed_env() -> Iterator[str]:
    """Point ``OPENAI_BASE_URL``/``OPENAI_API_BASE`` at :func:`openai_base_url` for the block,
    then restore both exactly as they were."""
    url = openai_base_url()
    saved = {name: os.environ.get(name) for name in BASE_URL_ENV}
    os.environ.update({name: url for name in BASE_URL_ENV})
    try:
        yield url
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def chat_model(model: str, session: AgentSession, **kwargs: Any) -> ChatOpenAI:
    """A ``ChatOpenAI`` speaking Chat Completions through the session's wire seam."""
    if session.provider != "openai":
        raise ConfigError(
            f"Tether's LangChain/LangGraph adapters build ChatOpenAI models (provider 'openai'), not "
            f"{session.provider!r}: bring your own agent or graph for other providers"
        )
    options: dict[str, Any] = dict(
        model=model,
        base_url=session.upstream() + "/v1",
        http_async_client=session.http_client(),
        http_client=session.http_client(sync=True),
        # With our own client ChatOpenAI leaves stream usage off; usage is what cost is read from.
        stream_usage=True,
        streaming=session.stream,
    )
    if (key := session.api_key()) is not None:
        options["api_key"] = key
    return ChatOpenAI(**{**options, **kwargs})


def langchain_tool(t: Tool) -> StructuredTool:
    """A Tether tool as a LangChain tool: LangChain builds the schema from the tool's own
    signature and docstring; every call goes through the tool seam."""
    return StructuredTool.from_function(coroutine=t.as_function(errors="raise"), name=t.name, description=t.description)


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


def answer_text(messages: Sequence[BaseMessage]) -> str:
    """The final answer: the text of the last AI message."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message.text
    return ""


class LangGraphAdapter(Adapter):
    """Compiled LangGraph graphs; memory is a checkpointer over the store (:class:`TetherCheckpointer`)."""

    framework = "langgraph"
    default_provider = "openai"

    def __init__(self) -> None:
        self._built: weakref.WeakSet[Any] = weakref.WeakSet()

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

    def _is_built(self, agent: Any) -> bool:
        """True for an agent :meth:`build` made (its model already speaks to the seam)."""
        try:
            return agent in self._built
        except TypeError:  # unhashable (a pydantic runnable): not one of ours
            return False

    def load(self, import_path: str) -> Any:
        """Import the user's graph (calling it if it is a factory function) with the OpenAI base
        URL pointing at the proxy, so a ``ChatOpenAI`` built on the way is routed. Without a run
        (``durable=False``) nothing is routed: the models go straight to their provider."""
        with routed_env() if current_run() is not None else contextlib.nullcontext():
            graph = super().load(import_path)
            if inspect.isfunction(graph) or inspect.ismethod(graph):
                graph = graph()
        return graph

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if not isinstance(agent, Pregel):
            raise ConfigError(f"tether-langgraph runs compiled LangGraph graphs, not {type(agent).__name__}: compile() it first")
        if session.durable and not self._is_built(agent):
            session.proxy_url()  # register the run, so /r/active/ (see openai_base_url) reaches its seam
        graph, saver, config = _with_memory(agent, session)
        if session.max_turns:
            config["recursion_limit"] = 2 * session.max_turns + 1  # a model step and a tool step per turn
        state = await _invoke(graph, {"messages": [HumanMessage(prompt)]}, config, stream=session.stream)
        if saver is not None:
            await saver.aflush()  # other threads commit to their own keys: store writes off the loop
        messages = state.get("messages", []) if isinstance(state, dict) else []
        return answer_text(messages)


def _with_memory(graph: Pregel, session: AgentSession) -> tuple[Pregel, TetherCheckpointer | None, dict[str, Any]]:
    """The graph with the run's checkpointer and the config naming its thread.

    With a memory key the thread is the key and the checkpointer is Tether's, replacing any the
    user compiled in (Tether's store is the memory). Without one, a graph compiled with a
    checkpointer gets an empty thread for this attempt, so an attempt never resumes another's
    half-done state behind the journal's back.
    """
    current = graph.checkpointer
    if session.memory is not None:
        graph = without_delta_channels(graph)  # memory keeps each checkpoint's values, not the writes
        if isinstance(current, TetherCheckpointer) and current.session is session:
            saver = current
        else:
            saver = TetherCheckpointer(session)
            graph = graph.copy(update={"checkpointer": saver})
        return graph, saver, {"configurable": {"thread_id": session.memory.key}}
    if current is None or current is False:
        return graph, None, {}
    graph = graph.copy(update={"checkpointer": TetherCheckpointer()})
    return graph, None, {"configurable": {"thread_id": f"tether-{uuid.uuid4().hex}"}}


async def _invoke(graph: Pregel, inputs: dict[str, Any], config: dict[str, Any], *, stream: bool) -> Any:
    """LangGraph's own runner: ``ainvoke``, or with ``stream`` ``astream`` in ``messages`` mode
    (the models stream their tokens) and ``values`` mode (the state after each step; the last
    one is the result)."""
    if not stream:
        return await graph.ainvoke(inputs, config)
    final: Any = None
    async for mode, chunk in graph.astream(inputs, config, stream_mode=["messages", "values"]):
        if mode == "values":
            final = chunk
    return final


__all__ = [
    "LangGraphAdapter",
    "agent_graph",
    "answer_text",
    "chat_model",
    "langchain_tool",
    "on_tool_error",
    "openai_base_url",
    "routed_env",
    "tool_node",
]
