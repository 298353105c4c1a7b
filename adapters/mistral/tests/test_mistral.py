"""What only Mistral has: server-side conversation state, two APIs, and the memory rule.

Every test runs the real ``mistralai`` SDK against the fake Mistral provider over HTTP. The shared
conformance suite (kit.py: Conversations API; kit_chat.py: chat completions) covers the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.agents import PROMPTS, SCRIPT, TOOLS
from tether.errors import ConfigError
from tether.journal import Record, read_records
from tether.stores import LocalStore
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether_mistral import ADAPTER, MistralAgent, run_agent

ROOT = Path(__file__).resolve().parents[3]
MODEL = "mistral-small-latest"

#: One attempt in its own process; after its first model turn it asks the fake provider to hold
#: back its next conversation answer (the server has taken the append: a "stall" fault answers
#: only after a pause), so the test can SIGKILL it between the server's answer and the record.
CHILD = """
import asyncio, json, sys
from tether_mistral import run_agent
from tether.testing.fake_provider import Fault, inject_remote
from tests.conformance.agents import PROMPTS, TOOLS

args = json.loads(sys.argv[1])
turns = 0

def on_step(event):
    global turns
    if event.kind == "model":
        turns += 1
        if turns == 1:
            inject_remote(args["origin"], Fault("stall:5", match_protocol="mistral-conversations"))

asyncio.run(run_agent(PROMPTS["multi"], tools=TOOLS, model=args["model"], run_id=args["run_id"], store=args["store"],
                      upstreams={"mistral": args["origin"] + "/mistral"}, stream=args["stream"], on_step=on_step))
"""


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    os.environ.setdefault("MISTRAL_API_KEY", "conformance")
    with FakeProvider(Script.from_dict(SCRIPT), seed=5) as provider:
        yield provider


def options(fake: FakeProvider, tmp_path: Path, run_id: str, **extra: object) -> dict:
    return {"run_id": run_id, "store": str(tmp_path / "store"), "upstreams": {"mistral": f"{fake.url}/mistral"}, **extra}


def records(tmp_path: Path, run_id: str) -> list[Record]:
    found = [r for r in read_records(LocalStore(tmp_path / "store"), run_id) if r.kind == "model"]
    return sorted(found, key=lambda r: r.started_at)


def conversation_calls(fake: FakeProvider) -> list:
    return [e for e in fake.ledger if e.protocol == "mistral-conversations" and e.status == 200]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_append_the_server_took_but_the_journal_never_recorded_is_not_sent_twice(fake, tmp_path, caplog, stream):
    """Killed after the server took the first append (its answer on the way) and before the
    journal recorded it. The retry replays the start and the tool, reads the conversation back,
    finds its function result already there, and takes the server's answer from the history: the
    conversation ends with every entry once, each tool ran once, and the run says what it did."""
    reference = asyncio.run(run_agent(PROMPTS["multi"], tools=TOOLS, model=MODEL, **options(fake, tmp_path, "reference")))
    fake.ledger.clear()
    log = tmp_path / "tools.jsonl"
    args = {"origin": fake.url, "model": MODEL, "run_id": "landed", "store": str(tmp_path / "store"), "stream": stream}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TETHER_TOOL_LOG": str(log)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    deadline = time.monotonic() + 120
    while len(conversation_calls(fake)) < 2:  # the start, then the append the server has taken
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline, "the append never reached the fake provider"
        time.sleep(0.01)
    child.kill()
    child.wait(30)
    [start] = records(tmp_path, "landed")  # the append's answer never reached the journal

    with caplog.at_level(logging.WARNING, logger="tether.wire"):
        os.environ["TETHER_TOOL_LOG"] = str(log)
        try:
            retry = asyncio.run(run_agent(PROMPTS["multi"], tools=TOOLS, model=MODEL, stream=stream, **options(fake, tmp_path, "landed")))
        finally:
            del os.environ["TETHER_TOOL_LOG"]
    assert retry.status == "succeeded" and retry.output == reference.output
    assert (retry.model_replayed, retry.model_live, retry.tool_replayed, retry.tool_live) == (1, 2, 1, 1)

    # One conversation, no entry twice: start, append (taken once, in the killed attempt), append.
    calls = conversation_calls(fake)
    assert calls[0].path == "/mistral/v1/conversations" and len(calls) == 3 and len({c.path for c in calls[1:]}) == 1
    conversation = calls[1].path.rsplit("/", 1)[-1]
    entries = fake.mistral_history(conversation)["entries"]
    assert [e["type"] for e in entries] == [
        "message.input",
        "function.call",
        "function.result",
        "function.call",
        "function.result",
        "message.output",
    ]
    results = Counter(e["tool_call_id"] for e in entries if e["type"] == "function.result")
    assert list(results.values()) == [1, 1]
    executed = Counter(json.loads(line)["tool"] for line in log.read_text().splitlines())
    assert executed == {"get_weather": 1, "lookup": 1}

    # Said: in the journal (the turn's record names where its answer came from) and in the log.
    resolved = [r for r in records(tmp_path, "landed") if r.response.get("resolved")]
    assert [r.response["resolved"] for r in resolved] == [f"/v1/conversations/{conversation}/history"]
    assert resolved[0].response["streamed"] is stream
    assert any("read back" in m and conversation in m for m in caplog.messages)
    # Every turn is priced by its model: an append names none, its answer does.
    assert {r.model for r in records(tmp_path, "landed")} == {MODEL}
    assert retry.usage_live["output_tokens"] > 0  # the final append, live; the resolved turn's usage is unknown

    # And the resolved turn replays like any other.
    again = asyncio.run(run_agent(PROMPTS["multi"], tools=TOOLS, model=MODEL, stream=stream, **options(fake, tmp_path, "landed")))
    assert again.model_live == 0 and again.output == reference.output and len(conversation_calls(fake)) == 3


async def test_an_append_that_never_reached_the_server_goes_live(fake, tmp_path):
    """The read-back finds nothing of the append (a 500 before the server took it): sent live, once."""
    from tether.testing.fake_provider import Fault

    # The append after the first turn fails (the SDK retries nothing by default); decided by the
    # provider when the call arrives, not by a step event, which may come after it left.
    fake.inject(Fault("status:500", match_protocol="mistral-conversations", after=1))
    with pytest.raises(Exception, match="500|Status"):
        await run_agent(PROMPTS["multi"], tools=TOOLS, model=MODEL, **options(fake, tmp_path, "never"))
    retry = await run_agent(PROMPTS["multi"], tools=TOOLS, model=MODEL, **options(fake, tmp_path, "never"))
    assert retry.status == "succeeded" and retry.model_replayed == 1 and retry.model_live == 2
    assert not any(r.response.get("resolved") for r in records(tmp_path, "never"))
    conversation = next(c.path for c in conversation_calls(fake) if c.path.count("/") > 3).rsplit("/", 1)[-1]
    types = [e["type"] for e in fake.mistral_history(conversation)["entries"]]
    assert types.count("function.result") == 2 and types[-1] == "message.output"


async def test_memory_starts_a_new_conversation_from_the_committed_transcript(fake, tmp_path):
    """memoryKey keeps each run's conversation id and transcript; the next run starts a new
    conversation whose inputs are that transcript (never an append to the old conversation)."""
    first = await run_agent(PROMPTS["memory1"], tools=TOOLS, model=MODEL, memory_key="ada", **options(fake, tmp_path, "m1"))
    second = await run_agent(PROMPTS["memory2"], tools=TOOLS, model=MODEL, memory_key="ada", **options(fake, tmp_path, "m2"))
    assert first.status == second.status == "succeeded"
    from tether.memory import Memory
    from tether.stores import open_store

    items = Memory(open_store(str(tmp_path / "store")), "default", "ada").load(writer="check")
    assert [i["api"] for i in items] == ["conversations", "conversations"]
    assert all(i["conversation_id"].startswith("conv_") for i in items) and items[0]["conversation_id"] != items[1]["conversation_id"]
    assert [e["type"] for e in items[0]["entries"]] == ["message.input", "function.call", "function.result", "message.output"]
    assert all("id" not in e and "created_at" not in e for e in items[0]["entries"])
    assert items[1]["entries"][0]["content"] == PROMPTS["memory2"]  # each run stores its own entries only
    second_start = json.loads(fake.ledger[len(fake.ledger) - len(records(tmp_path, "m2"))].body)
    sent = [{k: v for k, v in e.items() if k != "object"} for e in second_start["inputs"]]  # the SDK adds object="entry"
    assert sent[:4] == items[0]["entries"] and sent[4:] == [
        {"type": "message.input", "role": "user", "content": PROMPTS["memory2"], "prefix": False}
    ]
    assert all(e.path.endswith("/v1/conversations") for e in fake.ledger[-len(records(tmp_path, "m2")) :][:1])


async def test_a_memory_key_holds_one_api(fake, tmp_path):
    await run_agent(PROMPTS["memory1"], tools=TOOLS, model=MODEL, memory_key="one", **options(fake, tmp_path, "api1"))
    with pytest.raises(ConfigError, match="holds a Mistral conversations transcript; this agent speaks chat"):
        await run_agent(PROMPTS["memory2"], tools=TOOLS, model=f"mistral-chat:{MODEL}", memory_key="one", **options(fake, tmp_path, "api2"))


def test_declarative_models_pick_the_api():
    from tether.agent import AgentSession, AgentSpec

    session = AgentSession(None, "mistral")
    assert ADAPTER.build(AgentSpec(MODEL, "mistral"), session).api == "conversations"
    chat = ADAPTER.build(AgentSpec(f"mistral-chat:{MODEL}", "mistral"), session)
    assert (chat.api, chat.model) == ("chat", MODEL)
    with pytest.raises(ConfigError, match="speak Mistral"):
        ADAPTER.build_spec(AgentSpec("gpt-4o-mini", "openai"), session)
    with pytest.raises(ConfigError, match="must be Tether tools"):
        MistralAgent(model=MODEL, tools=[print])  # type: ignore[list-item]


@pytest.mark.parametrize("model", [MODEL, f"mistral-chat:{MODEL}"])
async def test_max_turns_stops_both_loops(fake, tmp_path, model):
    with pytest.raises(RuntimeError, match="no answer after 2 turns"):
        await run_agent(PROMPTS["multi"], tools=TOOLS, model=model, max_turns=2, **options(fake, tmp_path, f"limit-{model}"))
    assert fake.live_calls() == 2
