"""Concurrent runs sharing one ``memory_key`` lose nothing (issue 8, item 9): what only LangGraph
has — a run that rewrites the thread (trims or summarises it with ``RemoveMessage``) while another
appends. The N-writers case is tests/conformance/test_memory_concurrency.py, run for every adapter.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from tether.agent import AgentSession
from tether.memory import Memory
from tether.stores import open_store
from tether_langgraph import TetherCheckpointer


def _graph(checkpointer, *, trim: bool):
    """A graph with no model: one node answers, and (``trim``) first cuts the thread to its
    last three messages with ``RemoveMessage`` — the way summarising/trimming graphs rewrite it."""

    async def answer(state: MessagesState) -> dict:
        reply = AIMessage(f"re: {state['messages'][-1].content}")
        if trim:
            return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *state["messages"][-3:], reply]}
        return {"messages": [reply]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    return builder.compile(checkpointer=checkpointer)


async def _start(memory: Memory, writer: str, *, trim: bool = False):
    session = AgentSession(None, "openai", memory, history=memory.load(writer=writer))
    saver = TetherCheckpointer(session)
    return session, saver, _graph(saver, trim=trim)


async def _finish(memory: Memory, writer: str, session, saver, graph) -> None:
    await graph.ainvoke({"messages": [HumanMessage(writer)]}, {"configurable": {"thread_id": "k"}})
    saver.flush()
    memory.commit(session.new_items, writer=writer)


async def test_a_run_that_rewrites_the_thread_keeps_a_concurrent_runs_turn(tmp_path):
    memory = Memory(open_store(str(tmp_path / "store")), "default", "k")
    for seed in ("s1", "s2"):
        await _finish(memory, seed, *await _start(memory, seed))
    # A and B start from the same thread; B appends and commits first, then A (which trimmed).
    a = await _start(memory, "A", trim=True)
    b = await _start(memory, "B")
    await _finish(memory, "B", *b)
    await _finish(memory, "A", *a)
    _, _, graph = await _start(memory, "reader")
    state = await graph.aget_state({"configurable": {"thread_id": "k"}})
    assert [m.content for m in state.values["messages"]] == ["s2", "re: s2", "A", "re: A", "B", "re: B"]
