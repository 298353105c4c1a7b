"""What only Deep Agents has: the virtual filesystem and sub-agents reached through ``task``.
The shared conformance suite covers the rest.

Every test runs a real ``create_deep_agent`` graph and the real ``ChatOpenAI`` against the fake
OpenAI provider over HTTP.
"""

from __future__ import annotations

import json

import pytest

from tests.support.adapter_tests import records, run_args, store  # noqa: F401 (store: a fixture)
from tether import tool
from tether.agent import AgentSession
from tether.memory import Memory
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider, Fault
from tether.testing.script import Script
from tether_deepagents import TetherCheckpointer, run_agent

MODEL = "gpt-4o-mini"
calls: list[str] = []

SCRIPT = {
    "conversations": [
        {
            "match": "notes:",
            "turns": [
                {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "/notes.md", "content": "Ada likes Paris."}}]},
                {"text": "Saved."},
            ],
        },
        {
            "match": "trip:",
            "turns": [
                {"tool_calls": [{"name": "write_file", "arguments": {"file_path": "/plan.md", "content": "Ada visits Paris."}}]},
                {
                    "tool_calls": [
                        {"name": "task", "arguments": {"description": "What is the weather in Paris?", "subagent_type": "general-purpose"}}
                    ]
                },
                {"tool_calls": [{"name": "read_file", "arguments": {"file_path": "/plan.md"}}]},
                {"text_from_tool_results": True, "text": "Plan:"},
            ],
        },
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        },
    ]
}


@tool
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    calls.append(f"get_weather:{city}")
    return f"The weather in {city} is sunny, 21 C."


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    calls.clear()


@pytest.fixture
def fake():
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        yield provider


def thread(store, key):
    """The memory key's thread as the graph sees it: the last checkpoint's channel values."""
    memory = Memory(open_store(store), "default", key)
    saver = TetherCheckpointer(AgentSession(None, "openai", memory, history=memory.load()))
    found = saver.get_tuple({"configurable": {"thread_id": key}})
    assert found is not None
    return found.checkpoint["channel_values"]


async def test_memory_keeps_the_virtual_files_and_the_transcript(fake, store):
    first = await run_agent(
        "notes: remember that Ada likes Paris", model=MODEL, tools=[get_weather], memory_key="ada", **run_args(fake, store, "n1")
    )
    assert first.status == "succeeded" and first.output == "Saved."
    values = thread(store, "ada")
    assert "/notes.md" in values["files"]
    second = await run_agent("what is the weather?", model=MODEL, tools=[get_weather], memory_key="ada", **run_args(fake, store, "n2"))
    assert second.status == "succeeded"
    sent = json.dumps(records(store, "n2")[0].request["body"]["messages"])
    assert "notes: remember that Ada likes Paris" in sent and "Saved." in sent
    assert "/notes.md" in thread(store, "ada")["files"]


async def test_a_retry_restores_the_files_and_replays_the_sub_agent(fake, store):
    """The main agent writes a file, hands a job to the general-purpose sub-agent (``task``), then
    reads the file back; its last turn fails. The retry replays all five earlier turns (the
    sub-agent's two included) and its tool from the journal: the file is there again, rebuilt
    from the replayed ``write_file`` turn, and the weather tool never runs twice."""
    # The sixth call fails, and ChatOpenAI's two retries with it. Decided by the provider when the
    # call arrives: a step event may come after the next request already left (a record waits for
    # the loop to turn to it, tether.wire.seam).
    fake.inject(Fault("status:500", times=3, after=5))
    with pytest.raises(Exception, match="500"):
        await run_agent("trip: plan Ada's day", model=MODEL, tools=[get_weather], **run_args(fake, store, "trip"))
    assert fake.live_calls() == 5 and calls == ["get_weather:Paris"]

    result = await run_agent("trip: plan Ada's day", model=MODEL, tools=[get_weather], **run_args(fake, store, "trip"))
    assert result.status == "succeeded" and "Ada visits Paris." in (result.output or "")
    assert (result.model_replayed, result.model_live, result.tool_replayed, result.tool_live) == (5, 1, 1, 0)
    assert calls == ["get_weather:Paris"]
    # The sub-agent's own turns are in the journal: its first request is the task description.
    firsts = [r.request["body"]["messages"] for r in records(store, "trip")]
    assert any(m[-1]["content"] == "What is the weather in Paris?" for m in firsts if m[-1]["role"] == "user")


async def test_your_own_deep_agent_keeps_its_files_under_a_memory_key_and_is_left_untouched(fake, store):
    """A deep agent built by the user (its model pointed at the proxy): the run's copy keeps
    ``files`` in memory; the user's graph still has Deep Agents' own ``DeltaChannel``s."""
    from deepagents import create_deep_agent
    from langchain_openai import ChatOpenAI
    from langgraph.channels.delta import DeltaChannel

    from tether_deepagents import langchain_tool, openai_base_url

    agent = create_deep_agent(model=ChatOpenAI(model=MODEL, base_url=openai_base_url(), max_retries=0), tools=[langchain_tool(get_weather)])
    result = await run_agent("notes: remember that Ada likes Paris", agent=agent, memory_key="own", **run_args(fake, store, "own"))
    assert result.status == "succeeded" and result.model_live == 2
    assert "/notes.md" in thread(store, "own")["files"]
    assert isinstance(agent.channels["files"], DeltaChannel) and isinstance(agent.channels["messages"], DeltaChannel)
