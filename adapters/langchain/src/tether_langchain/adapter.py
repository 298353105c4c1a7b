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

import uuid
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ToolErrorMiddleware
from langchain_core.messages import HumanMessage

from tether.agent import AgentSession, AgentSpec, tool_error_text
from tether.errors import ConfigError, ToolError

# LangChain agents are LangGraph graphs: the model client, tool wrapping and proxy routing are
# tether-langgraph's, shared rather than copied.
from tether_langgraph.adapter import LangGraphAdapter, answer_text, chat_model, langchain_tool, openai_base_url, routed_env

from .memory import MessageHistory


def _on_tool_error(exc: Exception, request: Any) -> str | None:
    """Terminal tool failures become an error ``ToolMessage`` the model sees; anything else
    (a bug in the agent) propagates."""
    return tool_error_text(exc) if isinstance(exc, ToolError) else None


def tool_errors() -> ToolErrorMiddleware:
    """LangChain's own tool-error path, set to hand :class:`~tether.errors.ToolError` to the model."""
    return ToolErrorMiddleware(on_error=_on_tool_error)


class LangChainAdapter(LangGraphAdapter):
    """``create_agent`` agents; memory is the message history (:class:`MessageHistory`).

    A LangChain agent is a LangGraph graph, so loading (with proxy routing) and telling built
    agents from brought ones are the LangGraph adapter's; building and running differ."""

    framework = "langchain"
    default_provider = "openai"

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

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if not hasattr(agent, "ainvoke"):
            raise ConfigError(
                f"tether-langchain runs LangChain agents (runnables taking {{'messages': [...]}}), not {type(agent).__name__}"
            )
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
