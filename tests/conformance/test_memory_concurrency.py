"""Concurrent runs sharing one ``memory_key`` lose nothing (issue 8, item 9), for every adapter.

N runs start together on one memory key (the adapter's real framework, the fake provider over real
HTTP, the local store), each commits its turn; then a new run on the key. What that run's first
request carried — read from the fake provider's ledger, i.e. the body the model was sent — must
hold every earlier turn exactly once. (In one process: concurrency, not a crash, is the point.)
"""

from __future__ import annotations

import asyncio

import pytest

from tether import tool
from tether.agent import load_adapter, run_agent
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether.wire.providers import API_KEY_ENV, PROVIDERS

SCRIPT = {
    "conversations": [{"match": "memory:", "turns": [{"tool_calls": [{"name": "note", "arguments": {"text": "x"}}]}, {"text": "Noted."}]}]
}


@tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted {text}"


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    for env in API_KEY_ENV.values():
        monkeypatch.setenv(env, "sk-test")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


@pytest.mark.parametrize("writers", [2, 5, 20])
async def test_concurrent_writers_on_one_memory_key_all_land_once(kit, tmp_path, writers):
    adapter = load_adapter(kit.FRAMEWORK)
    with FakeProvider(Script.from_dict(SCRIPT), seed=1) as fake:
        common = dict(
            model=kit.MODEL,
            tools=[note],
            memory_key="shared",
            store=str(tmp_path / "store"),
            upstreams={p: f"{fake.url}/{p}" for p in PROVIDERS},
        )
        prompts = [f"memory: writer {i} says hello" for i in range(writers)]
        results = await asyncio.gather(*(run_agent(adapter, p, run_id=f"w{i}", **common) for i, p in enumerate(prompts)))
        assert [r.status for r in results] == ["succeeded"] * writers
        fake.ledger.clear()
        final = await run_agent(adapter, "memory: who said hello?", run_id="reader", **common)
        assert final.status == "succeeded"
        sent = fake.ledger[0].body.decode()
    # Each earlier run's whole turn, exactly once: its prompt, its tool result and its answer.
    for prompt in prompts:
        assert sent.count(prompt) == 1, f"{prompt!r} sent {sent.count(prompt)} times"
    assert sent.count("memory: who said hello?") == 1
    assert sent.count("noted x") == writers and sent.count("Noted.") == writers
