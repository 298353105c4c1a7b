"""What only Deep Agents has: the virtual filesystem and sub-agents reached through ``task``.
The shared conformance suite covers the rest.

Every test runs a real ``create_deep_agent`` graph and the real ``ChatOpenAI`` against the fake
OpenAI provider over HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tether_deepagents import TetherCheckpointer, run_agent

from tether import tool
from tether.agent import AgentSession
from tether.journal import Record
from tether.memory import Memory
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

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


@pytest.fixture
def store(tmp_path):
    return str(tmp_path / "store")


def common(fake, store, run_id, **kw):
    return dict(run_id=run_id, store=store, upstreams={"openai": fake.url + "/openai"}, **kw)


def records(store, run_id, kind="model"):
    root = Path(store) / "journal" / run_id / kind
    return sorted((Record.decode(p.read_bytes()) for p in root.glob("*.rec")), key=lambda r: r.started_at)


def thread(store, key):
    """The memory key's thread as the graph sees it: the last checkpoint's channel values."""
    items = Memory(open_store(store), "default", key).load()
    saver = TetherCheckpointer(AgentSession(None, "openai", history=items))
    return saver.get_tuple({"configurable": {"thread_id": key}}).checkpoint["channel_values"]


async def test_memory_keeps_the_virtual_files_and_the_transcript(fake, store):
    first = await run_agent(
        "notes: remember that Ada likes Paris", model=MODEL, tools=[get_weather], memory_key="ada", **common(fake, store, "n1")
    )
    assert first.status == "succeeded" and first.output == "Saved."
    values = thread(store, "ada")
    assert "/notes.md" in values["files"]
    second = await run_agent("what is the weather?", model=MODEL, tools=[get_weather], memory_key="ada", **common(fake, store, "n2"))
    assert second.status == "succeeded"
    sent = json.dumps(records(store, "n2")[0].request["body"]["messages"])
    assert "notes: remember that Ada likes Paris" in sent and "Saved." in sent
    assert "/notes.md" in thread(store, "ada")["files"]
