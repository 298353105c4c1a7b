"""The Deep Agents adapter: ``deepagents.create_deep_agent`` graphs, durably.

Declarative: ``create_deep_agent(model=ChatOpenAI(...), tools=[StructuredTool...],
system_prompt=instructions)`` — Deep Agents adds its planning tool (``write_todos``), its virtual
filesystem (``ls``, ``read_file``, ``write_file``, ``edit_file``, ``glob``, ``grep``, kept in the
graph's ``files`` state) and its ``task`` tool with the default general-purpose sub-agent. The
model is tether-langgraph's ``ChatOpenAI`` on the wire seam, so every model request — the main
agent's and each sub-agent's — is journaled and replayed by its Chat Completions body; Tether
tools go through the tool seam (a terminal failure reaches the model through LangChain's
``ToolErrorMiddleware``). Deep Agents' own tools (filesystem, todos, ``task``) are not Tether
tools: they are pure state updates of the graph, recomputed on replay from the replayed model
turns.

A deep agent is a compiled LangGraph graph, so bring-your-own (a compiled deep agent or
``"pkg.mod:agent"``, a factory function is called), proxy routing of the user's ``ChatOpenAI``
and memory are tether-langgraph's: with a ``memory_key`` the thread is the key and the
checkpointer is :class:`~tether_langgraph.memory.TetherCheckpointer`, whose deltas carry every
channel — the transcript (``messages``) and the virtual filesystem (``files``).

Deep Agents keeps ``messages`` and ``files`` in LangGraph's beta ``DeltaChannel`` (a checkpoint
holds a sentinel, the value is rebuilt from ancestors' writes), which the Tether checkpointer does
not keep. With a memory key the run's graph (a copy; the user's object is untouched) has those
channels as plain reducer channels over Deep Agents' own batch reducers, so each checkpoint holds
the value and the memory item is an ``extend`` of the new messages and a ``set`` of the files.
"""

from __future__ import annotations

from typing import Any

from deepagents import create_deep_agent
from langgraph.pregel import Pregel

from tether.agent import AgentSession, AgentSpec

# A deep agent is a compiled LangGraph graph built by create_agent: everything but building is
# the LangChain family's (tether_langgraph.family).
from tether_langgraph.family import (
    CheckpointedGraphAdapter,
    TetherCheckpointer,
    chat_model,
    langchain_tool,
    tool_errors,
    without_delta_channels,
)


class DeepAgentsAdapter(CheckpointedGraphAdapter):
    """``create_deep_agent`` graphs; loading, routing, running and memory are the LangChain
    family's (those of LangGraph's compiled graphs), only building differs."""

    framework = "deepagents"

    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        agent = create_deep_agent(
            model=chat_model(spec.model, session),
            tools=[langchain_tool(t) for t in spec.tools],
            system_prompt=spec.instructions,
            middleware=[tool_errors()],
            checkpointer=TetherCheckpointer(session) if session.memory is not None else None,
            name=spec.name,
        )
        self._built.add(agent)
        return agent

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if session.memory is not None and isinstance(agent, Pregel):
            plain = without_delta_channels(agent)
            if plain is not agent and self._is_built(agent):
                self._built.add(plain)
            agent = plain
        return await super().run(agent, prompt, session)
