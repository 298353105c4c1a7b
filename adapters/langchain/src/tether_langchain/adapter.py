"""The LangChain adapter: ``langchain.agents.create_agent`` runs, durably.

Declarative: ``create_agent(ChatOpenAI(...), tools=[StructuredTool...], system_prompt=...)``. The
model client is a ``ChatOpenAI`` whose httpx clients (async and sync) are the wire seam's
in-process transports and whose ``base_url`` is the run's upstream: the Chat Completions body it
sends is what gets fingerprinted, never LangChain's message ids or run ids. Tools are
``StructuredTool.from_function(coroutine=tool.as_function(errors="raise"))`` — LangChain builds the
schema from the function's own signature — and a terminal tool failure reaches the model through
LangChain's own error path, ``ToolErrorMiddleware``, as an error ``ToolMessage``.

Bring your own: a LangChain agent (anything with ``ainvoke({"messages": [...]})``: a
``create_agent`` graph, a runnable composed of agents) or ``"pkg.mod:name"`` (a factory function is
called). Its ``ChatOpenAI`` was built by the user, so while the module is imported (and the
factory called) ``OPENAI_BASE_URL``/``OPENAI_API_BASE`` point at the loopback proxy's
``/r/active/openai/v1``, then are restored; the run registers with the proxy so that URL reaches
its seam. An object built before the run and not through :func:`openai_base_url` goes wherever
its own ``base_url`` says: see the README.

The agent's own loop runs (``ainvoke``, or ``astream`` with ``stream=True``); Tether only routes.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import uuid
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI
from tether.agent import Adapter, AgentSession, AgentSpec, Tool, current_run, tool_error_text
from tether.errors import ConfigError, ToolError

from .memory import MessageHistory

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
            f"tether-langchain builds ChatOpenAI models (provider 'openai'), not {session.provider!r}: "
            "bring your own agent for other providers"
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


def tool_errors() -> ToolErrorMiddleware:
    """LangChain's own tool-error path, set to hand :class:`~tether.errors.ToolError` to the model."""
    return ToolErrorMiddleware(on_error=_on_tool_error)


def answer_text(messages: Sequence[BaseMessage]) -> str:
    """The final answer: the text of the last AI message."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message.text
    return ""


class LangChainAdapter(Adapter):
    """``create_agent`` agents; memory is the message history (:class:`MessageHistory`)."""

    framework = "langchain"
    default_provider = "openai"

    def __init__(self) -> None:
        self._built: weakref.WeakSet[Any] = weakref.WeakSet()

    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        agent = create_agent(
            chat_model(spec.model, session),
            tools=[langchain_tool(t) for t in spec.tools],
            system_prompt=spec.instructions,
            middleware=[tool_errors()],
            name=spec.name,
        )
        self._built.add(agent)
        return agent

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

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if not hasattr(agent, "ainvoke"):
            raise ConfigError(f"tether-langchain runs LangChain agents (runnables taking {{'messages': [...]}}), not {type(agent).__name__}")
        if session.durable and not self._is_built(agent):
            session.proxy_url()  # register the run, so /r/active/ (see openai_base_url) reaches its seam
        history = MessageHistory(session) if session.memory is not None else None
        before = history.committed if history is not None else []
        inputs = {"messages": [*before, HumanMessage(prompt)]}
        state = await _invoke(agent, inputs, _config(agent, session), stream=session.stream)
        messages = list(state["messages"]) if isinstance(state, dict) and "messages" in state else []
        if history is not None:
            history.add_messages(messages[len(before) :])
        return answer_text(messages)


def _config(agent: Any, session: AgentSession) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if session.max_turns:
        config["recursion_limit"] = 2 * session.max_turns + 1  # a model step and a tool step per turn
    if getattr(agent, "checkpointer", None) is not None:
        # The user's own checkpointer needs a thread; a fresh one per attempt, so it never adds
        # state of its own to the conversation (Tether's memory is the message history).
        config["configurable"] = {"thread_id": f"tether-{uuid.uuid4().hex}"}
    return config


async def _invoke(agent: Any, inputs: dict[str, Any], config: dict[str, Any], *, stream: bool) -> Any:
    """The agent's own runner: ``ainvoke``, or with ``stream`` the graph's ``astream`` (token
    streams from the model, the state after each step; the last one is the result). A runnable
    that is not a graph is invoked: its graphs stream only if their models are set to."""
    from langgraph.pregel import Pregel

    if not stream or not isinstance(agent, Pregel):
        return await agent.ainvoke(inputs, config)
    final: Any = None
    async for mode, chunk in agent.astream(inputs, config, stream_mode=["messages", "values"]):
        if mode == "values":
            final = chunk
    return final


__all__ = [
    "LangChainAdapter",
    "answer_text",
    "chat_model",
    "langchain_tool",
    "openai_base_url",
    "routed_env",
    "tool_errors",
]
