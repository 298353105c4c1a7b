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
from langchain_core.messages import HumanMessage

from tether.agent import AgentSession, AgentSpec
from tether.errors import ConfigError

# LangChain agents are LangGraph graphs: the model client, tool wrapping, proxy routing and the
# runner are the family's (tether_langgraph.family), shared rather than copied.
from tether_langgraph.family import GraphAdapter, answer_text, chat_model, invoke, langchain_tool, tool_errors

from .memory import MessageHistory


class LangChainAdapter(GraphAdapter):
    """``create_agent`` agents; memory is the message history (:class:`MessageHistory`).

    A LangChain agent is a LangGraph graph, so loading (with proxy routing) and telling built
    agents from brought ones are the family's; building and running (memory) are LangChain's."""

    framework = "langchain"

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
        self.register(agent, session)
        history = MessageHistory(session) if session.memory is not None else None
        before = history.committed if history is not None else []
        inputs = {"messages": [*before, HumanMessage(prompt)]}
        state = await invoke(agent, inputs, _config(agent, session), stream=session.stream)
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
