"""What the LangChain family's adapters share: tether-langgraph, tether-langchain and
tether-deepagents all run LangGraph graphs whose models are ``ChatOpenAI``.

This module is the family's one meeting point: the LangChain and Deep Agents adapters import it
and nothing else of this package (never ``tether_langgraph.adapter``), and never each other. It
lives in tether-langgraph because LangGraph is the family's floor — a ``create_agent`` agent and a
deep agent are compiled LangGraph graphs — and tether-langgraph's dependencies (langgraph,
langchain-openai) are exactly what it needs, so a separate distribution would add one more
package to install and pin without adding a dependency boundary.

- routing: :func:`openai_base_url` and :func:`routed_env` point a ``ChatOpenAI`` built before its
  run at the loopback proxy; :func:`chat_model` builds one on the run's wire seam;
- tools: :func:`langchain_tool` (every call through the tool seam), :func:`tool_errors`
  (LangChain's ``ToolErrorMiddleware`` handing :class:`~tether.errors.ToolError` to the model);
- running: :class:`GraphAdapter` (bring-your-own loading with routing, telling built agents from
  brought ones) and :class:`CheckpointedGraphAdapter` (a compiled graph run by LangGraph's own
  runner, memory as a :class:`~tether_langgraph.memory.TetherCheckpointer` thread);
  :func:`invoke` and :func:`answer_text`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, cast

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.pregel import Pregel
from langgraph.types import StreamMode

from tether.agent import Adapter, AgentSession, Tool, current_run, tool_error_text
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


def _on_tool_error(exc: Exception, request: Any) -> str | None:
    """Terminal tool failures become an error ``ToolMessage`` the model sees; anything else
    (a bug in the agent) propagates."""
    return tool_error_text(exc) if isinstance(exc, ToolError) else None


def tool_errors() -> Any:
    """LangChain's own tool-error path (``ToolErrorMiddleware``), set to hand
    :class:`~tether.errors.ToolError` to the model. For the members that run ``create_agent``
    graphs (LangChain, Deep Agents), whose distributions bring ``langchain``: imported here, on
    use, because tether-langgraph itself does not depend on it."""
    middleware = importlib.import_module("langchain.agents.middleware")
    return middleware.ToolErrorMiddleware(on_error=_on_tool_error)


def answer_text(messages: Sequence[BaseMessage]) -> str:
    """The final answer: the text of the last AI message."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message.text
    return ""


async def invoke(agent: Any, inputs: dict[str, Any], config: dict[str, Any], *, stream: bool) -> Any:
    """The agent's own runner: ``ainvoke``, or with ``stream`` the graph's ``astream`` in
    ``messages`` mode (the models stream their tokens) and ``values`` mode (the state after each
    step; the last one is the result). A runnable that is not a graph is invoked: its graphs
    stream only if their models are set to."""
    if not stream or not isinstance(agent, Pregel):
        return await agent.ainvoke(inputs, config)
    final: Any = None
    modes: list[StreamMode] = ["messages", "values"]
    async for mode, chunk in agent.astream(inputs, cast(RunnableConfig, config), stream_mode=modes):
        if mode == "values":
            final = chunk
    return final


class GraphAdapter(Adapter):
    """The family's base: bring-your-own loading with the OpenAI base URL routed to the proxy,
    and the agents :meth:`build` made (their models already speak to the seam) told apart from
    brought ones (which register with the proxy, see :meth:`register`)."""

    def __init__(self) -> None:
        self._built: weakref.WeakSet[Any] = weakref.WeakSet()

    def _is_built(self, agent: Any) -> bool:
        """True for an agent :meth:`build` made (its model already speaks to the seam)."""
        try:
            return agent in self._built
        except TypeError:  # unhashable (a pydantic runnable): not one of ours
            return False

    def load(self, import_path: str) -> Any:
        """Import the user's agent (calling it if it is a factory function) with the OpenAI base
        URL pointing at the proxy, so a ``ChatOpenAI`` built on the way is routed. Without a run
        (``durable=False``) nothing is routed: the models go straight to their provider."""
        with routed_env() if current_run() is not None else contextlib.nullcontext():
            agent = super().load(import_path)
            if inspect.isfunction(agent) or inspect.ismethod(agent):
                agent = agent()
        return agent

    def register(self, agent: Any, session: AgentSession) -> None:
        """A brought agent's models were built on :func:`openai_base_url`: register the run, so
        ``/r/active/`` reaches its seam."""
        if session.durable and not self._is_built(agent):
            session.proxy_url()


class CheckpointedGraphAdapter(GraphAdapter):
    """Compiled graphs run by LangGraph's own runner; memory is a checkpointer thread over the
    store (:class:`TetherCheckpointer`, ``thread_id`` = the memory key)."""

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if not isinstance(agent, Pregel):
            raise ConfigError(f"tether-langgraph runs compiled LangGraph graphs, not {type(agent).__name__}: compile() it first")
        self.register(agent, session)
        graph, saver, config = _with_memory(agent, session)
        if session.max_turns:
            config["recursion_limit"] = 2 * session.max_turns + 1  # a model step and a tool step per turn
        state = await invoke(graph, {"messages": [HumanMessage(prompt)]}, config, stream=session.stream)
        if saver is not None:
            await saver.aflush()  # other threads commit to their own keys: store writes off the loop
        messages = state.get("messages", []) if isinstance(state, dict) else []
        return answer_text(messages)


def _with_memory(graph: Pregel[Any], session: AgentSession) -> tuple[Pregel[Any], TetherCheckpointer | None, dict[str, Any]]:
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


__all__ = [
    "BASE_URL_ENV",
    "CheckpointedGraphAdapter",
    "GraphAdapter",
    "TetherCheckpointer",
    "answer_text",
    "chat_model",
    "invoke",
    "langchain_tool",
    "openai_base_url",
    "routed_env",
    "tool_errors",
    "without_delta_channels",
]
