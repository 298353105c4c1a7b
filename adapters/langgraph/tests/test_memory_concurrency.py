"""Concurrent runs sharing one ``memory_key`` lose nothing (issue 8, item 9).

N runs start together on one memory key (the real LangGraph graph, the fake provider over real
HTTP, the local store), each commits its turn; then a new run on the key. What that run's first
request carried — read from the fake provider's ledger, i.e. the body the model was sent — must
hold every earlier turn exactly once.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from tether import tool
from tether.agent import AgentSession
from tether.memory import Memory
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether_langgraph import TetherCheckpointer, run_agent

SCRIPT = {
    "conversations": [{"match": "memory:", "turns": [{"tool_calls": [{"name": "note", "arguments": {"text": "x"}}]}, {"text": "Noted."}]}]
}


@tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted {text}"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


@pytest.mark.parametrize("writers", [2, 5, 20])
async def test_concurrent_writers_on_one_memory_key_all_land_once(tmp_path, writers):
    store = str(tmp_path / "store")
    with FakeProvider(Script.from_dict(SCRIPT), seed=1) as fake:
        common = dict(model="gpt-4o-mini", tools=[note], memory_key="shared", store=store, upstreams={"openai": fake.url + "/openai"})
        prompts = [f"memory: writer {i} says hello" for i in range(writers)]
        results = await asyncio.gather(*(run_agent(p, run_id=f"w{i}", **common) for i, p in enumerate(prompts)))
        assert [r.status for r in results] == ["succeeded"] * writers
        fake.ledger.clear()
        final = await run_agent("memory: who said hello?", run_id="reader", **common)
        assert final.status == "succeeded"
        sent = json.loads(fake.ledger[0].body)["messages"]
    users = [m["content"] for m in sent if m["role"] == "user"]
    assert sorted(users[:-1]) == sorted(prompts) and users[-1] == "memory: who said hello?"
    # Each earlier run's whole turn, once: its tool call, the tool's result and its answer.
    assert sum(m["role"] == "tool" for m in sent) == writers
    assert [m.get("content") for m in sent if m["role"] == "assistant" and not m.get("tool_calls")] == ["Noted."] * writers
    assert len({c["id"] for m in sent for c in m.get("tool_calls") or []}) == writers


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
