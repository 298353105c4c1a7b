"""Server-side Mistral agents (``agent_id``) and their handoffs, durably.

A triage agent looks the order up (its own tool), then hands the conversation to a refund agent on
Mistral's server; the refund agent calls the refund tool and answers. The handoff happens inside
one append's response (``agent.handoff`` entry, then the refund agent's function call), so it is
recorded and replayed with that turn. The agents are created with the real SDK against the fake
provider; every attempt runs in its own process, so an attempt can be SIGKILLed like a dying node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mistralai.client import Mistral
from mistralai.client.models import FunctionTool

from tether.agent import AgentSession, AgentSpec
from tether.errors import ConfigError
from tether.journal import Record, read_records
from tether.stores import LocalStore
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether_mistral import ADAPTER, MistralAgent

ROOT = Path(__file__).resolve().parents[3]
MODEL = "mistral-small-latest"
PROMPT = "I want a refund for order A1"

SCRIPT = [
    {
        "match": "refund for order",
        "system": "You triage",
        "turns": [{"tool_calls": [{"name": "find_order", "arguments": {"order": "A1"}}]}, {"handoff": "refund-agent"}],
    },
    {
        "match": "refund for order",
        "system": "You issue refunds",
        "turns": [
            {"tool_calls": [{"name": "refund_order", "arguments": {"order": "A1", "amount": 20}}]},
            {"text_from_tool_results": True, "text": "Refund agent:"},
        ],
    },
]

#: One attempt. The tools log each real execution to $TETHER_TOOL_LOG; ``kill_after_turn`` SIGKILLs
#: the process right after that many model turns were recorded; ``stall_after_turn`` asks the fake
#: provider to hold back its next conversation answer after that turn (the server has taken the
#: append, the journal has not recorded its answer: the test kills the process then).
CHILD = """
import asyncio, json, os, signal, sys
from tether_mistral import MistralAgent, run_agent, tool
from tether.testing.fake_provider import Fault, inject_remote

def log(name, **arguments):
    with open(os.environ["TETHER_TOOL_LOG"], "a") as f:
        f.write(json.dumps({"tool": name, "arguments": arguments}) + "\\n")

@tool
def find_order(order: str) -> str:
    \"\"\"Find an order.\"\"\"
    log("find_order", order=order)
    return f"order {order}: 20 USD, paid"

@tool
def refund_order(order: str, amount: int) -> str:
    \"\"\"Refund an order.\"\"\"
    log("refund_order", order=order, amount=amount)
    return f"refunded {amount} USD on {order}"

args = json.loads(sys.argv[1])
turns = 0

def on_step(event):
    global turns
    if event.kind != "model":
        return
    turns += 1
    if turns == args.get("stall_after_turn"):
        inject_remote(args["origin"], Fault("stall:10", match_protocol="mistral-conversations"))
    if turns == args.get("kill_after_turn"):
        os.kill(os.getpid(), signal.SIGKILL)

tools = [find_order, refund_order]
if args.get("declarative"):  # the AgentRun form: the agent named as the model, the tools beside it
    how = {"model": "mistral-agent:" + args["agent_id"], "tools": tools}
else:
    how = {"agent": MistralAgent(agent_id=args["agent_id"], tools=tools)}
result = asyncio.run(run_agent(PROMPT, **how, run_id=args["run_id"], store=args["store"],
                               upstreams={"mistral": args["origin"] + "/mistral"}, stream=args["stream"], on_step=on_step,
                               memory_key=args.get("memory_key")))
print(json.dumps({"status": result.status, "output": result.output, "model_live": result.model_live,
                  "model_replayed": result.model_replayed, "tool_live": result.tool_live, "tool_replayed": result.tool_replayed}))
""".replace("PROMPT", repr(PROMPT))


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(Script.from_dict(SCRIPT), seed=7) as provider:
        yield provider


@pytest.fixture
def agents(fake: FakeProvider) -> dict[str, str]:
    """The two agents, created on the (fake) server with the SDK, as user code does."""
    client = Mistral(api_key="k", server_url=fake.base_url("mistral"))

    def function(name: str, *params: str) -> Any:  # the tool as JSON, as a user may write it
        properties = {p: {"type": "string"} for p in params}
        return {
            "type": "function",
            "function": {"name": name, "description": name, "parameters": {"type": "object", "properties": properties}},
        }

    refund = client.beta.agents.create(
        model=MODEL, name="refund-agent", instructions="You issue refunds.", tools=[function("refund_order", "order", "amount")]
    )
    triage = client.beta.agents.create(
        model=MODEL, name="triage-agent", instructions="You triage requests.", tools=[function("find_order", "order")], handoffs=[refund.id]
    )
    return {"triage": triage.id, "refund": refund.id}


def start(fake: FakeProvider, tmp_path: Path, agent_id: str, run_id: str, **extra: object) -> subprocess.Popen:
    args = {"origin": fake.url, "agent_id": agent_id, "run_id": run_id, "store": str(tmp_path / "store"), "stream": False, **extra}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TETHER_TOOL_LOG": str(tmp_path / "tools.jsonl"), "MISTRAL_API_KEY": "k"}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(args)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def attempt(fake: FakeProvider, tmp_path: Path, agent_id: str, run_id: str, **extra: object) -> dict:
    child = start(fake, tmp_path, agent_id, run_id, **extra)
    out, err = child.communicate(timeout=180)
    if extra.get("kill_after_turn"):
        assert child.returncode == -9, err
        return {}
    assert child.returncode == 0, err
    outcome: dict = json.loads(out.strip().splitlines()[-1])
    return outcome


def executed(tmp_path: Path) -> Counter:
    log = tmp_path / "tools.jsonl"
    return Counter(json.loads(line)["tool"] for line in log.read_text().splitlines()) if log.exists() else Counter()


def conversation_calls(fake: FakeProvider) -> list:
    return [e for e in fake.ledger if e.protocol == "mistral-conversations" and e.status == 200]


def records(tmp_path: Path, run_id: str) -> list[Record]:
    found = [r for r in read_records(LocalStore(tmp_path / "store"), run_id) if r.kind == "model"]
    return sorted(found, key=lambda r: r.started_at)


HISTORY = ["message.input", "function.call", "function.result", "agent.handoff", "function.call", "function.result", "message.output"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_handoff_run_killed_after_each_turn_replays_without_repeating(fake, agents, tmp_path, stream):
    """Three model turns: triage's start (find_order), the append whose answer holds the handoff
    and the refund agent's call, the refund agent's answer. Killed after each in turn; each retry
    makes no live call for a recorded turn, each tool (of either agent) ran once, and the answer
    is the refund agent's."""
    live = []
    for k in (1, 2, 3):
        before = len(conversation_calls(fake))
        attempt(fake, tmp_path, agents["triage"], "refund", kill_after_turn=k, stream=stream)
        live.append(len(conversation_calls(fake)) - before)
    assert live == [1, 1, 1]  # attempt k replays the k-1 turns the earlier attempts recorded
    result = attempt(fake, tmp_path, agents["triage"], "refund", stream=stream)
    assert result["status"] == "succeeded"
    assert (result["model_live"], result["model_replayed"], result["tool_live"], result["tool_replayed"]) == (0, 3, 0, 2)
    assert len(conversation_calls(fake)) == 3
    assert executed(tmp_path) == {"find_order": 1, "refund_order": 1}
    assert result["output"] == "Refund agent: refunded 20 USD on A1"

    # One conversation on the server, the handoff in it once; the last answer is the refund agent's.
    conversation = conversation_calls(fake)[-1].path.rsplit("/", 1)[-1]
    entries = fake.mistral_history(conversation)["entries"]
    assert [e["type"] for e in entries] == HISTORY
    handoff = entries[3]
    assert (handoff["previous_agent_id"], handoff["next_agent_id"]) == (agents["triage"], agents["refund"])
    assert [e["agent_id"] for e in entries if e["type"] in ("function.call", "message.output")] == [
        agents["triage"],
        agents["refund"],
        agents["refund"],
    ]
    # The handoff is in the journal with the turn that holds it.
    [held] = [r for r in records(tmp_path, "refund") if b"agent.handoff" in r.body]
    assert held.response["streamed"] is stream and b'"next_agent_name":"refund-agent"' in held.body


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_append_taken_across_a_handoff_is_read_back_not_sent_twice(fake, agents, tmp_path, stream):
    """Killed after the server took the append whose answer holds the handoff (the answer on its
    way) and before the journal recorded it. The retry reads the conversation back and takes
    that answer, handoff included, from the history: nothing appended twice, the refund agent's
    call runs once, and the next append goes to the conversation, which the refund agent now holds."""
    child = start(fake, tmp_path, agents["triage"], "landed", stall_after_turn=1, stream=stream)
    assert child.stderr is not None
    deadline = time.monotonic() + 120
    while len(conversation_calls(fake)) < 2:  # the start, then the append the server has taken
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline, "the append never reached the fake provider"
        time.sleep(0.01)
    child.kill()
    child.wait(30)
    assert len(records(tmp_path, "landed")) == 1  # the append's answer never reached the journal

    result = attempt(fake, tmp_path, agents["triage"], "landed", stream=stream)
    assert result["status"] == "succeeded" and result["output"] == "Refund agent: refunded 20 USD on A1"
    assert (result["model_replayed"], result["model_live"], result["tool_replayed"], result["tool_live"]) == (1, 2, 1, 1)
    assert executed(tmp_path) == {"find_order": 1, "refund_order": 1}

    calls = conversation_calls(fake)
    assert len(calls) == 3 and calls[1].path == calls[2].path  # start, the append taken once, the last append
    conversation = calls[1].path.rsplit("/", 1)[-1]
    entries = fake.mistral_history(conversation)["entries"]
    assert [e["type"] for e in entries] == HISTORY
    assert entries[-1]["agent_id"] == agents["refund"]  # the resumed append went to the agent handed to
    [resolved] = [r for r in records(tmp_path, "landed") if r.response.get("resolved")]
    assert resolved.response["resolved"] == f"/v1/conversations/{conversation}/history"
    assert resolved.response["streamed"] is stream

    again = attempt(fake, tmp_path, agents["triage"], "landed", stream=stream)
    assert again["model_live"] == 0 and again["output"] == result["output"] and len(conversation_calls(fake)) == 3


def test_memory_carries_the_handoff_into_the_next_run(fake, agents, tmp_path):
    """memoryKey keeps the transcript with its agent.handoff entry; the next run starts a new
    conversation with the entry agent whose inputs carry that transcript, handoff included."""
    first = attempt(fake, tmp_path, agents["triage"], "m1", memory_key="ada")
    second = attempt(fake, tmp_path, agents["triage"], "m2", memory_key="ada")
    assert first["status"] == second["status"] == "succeeded"
    starts = [json.loads(e.body) for e in conversation_calls(fake) if e.path.endswith("/v1/conversations")]
    assert [s["agent_id"] for s in starts] == [agents["triage"]] * 2 and "model" not in starts[1]
    inputs = starts[1]["inputs"]
    assert [e["type"] for e in inputs] == [*HISTORY, "message.input"]
    assert inputs[3]["next_agent_id"] == agents["refund"] and inputs[-1]["content"] == PROMPT


def test_declarative_agent_id_runs_the_server_side_agent(fake, agents, tmp_path):
    result = attempt(fake, tmp_path, agents["triage"], "declarative", declarative=True)
    assert result["status"] == "succeeded" and result["output"] == "Refund agent: refunded 20 USD on A1"
    assert all(json.loads(e.body).get("agent_id") == agents["triage"] for e in conversation_calls(fake)[:1])


def test_what_a_server_side_agent_refuses():
    session = AgentSession(None, "mistral")
    built = ADAPTER.build(AgentSpec("mistral-agent:ag_123", "mistral"), session)
    assert (built.agent_id, built.model, built.api) == ("ag_123", "", "conversations")
    with pytest.raises(ConfigError, match="instructions live on the agent"):
        ADAPTER.build(AgentSpec("mistral-agent:ag_123", "mistral", instructions="Be brief."), session)
    with pytest.raises(ConfigError, match="a model or an agent_id"):
        MistralAgent()
    with pytest.raises(ConfigError, match="a model or an agent_id"):
        MistralAgent(model=MODEL, agent_id="ag_123")
    for extra in ({"instructions": "x"}, {"completion_args": {"temperature": 0}}, {"api": "chat"}, {"agents": [MistralAgent(model=MODEL)]}):
        with pytest.raises(ConfigError, match="server-side agent on the Conversations API"):
            MistralAgent(agent_id="ag_123", **extra)


def test_a_retry_or_a_new_run_makes_no_new_agent_version(fake, agents, tmp_path):
    """The SDK's RunContext writes the registered functions into the entry agent at the start of
    each attempt, and every update is a new version of the agent on the server. The first attempt
    adds the tools (one version); the retry of a killed attempt, and a later run with the same
    tools, find them there and change nothing."""
    client = Mistral(api_key="k", server_url=fake.base_url("mistral"))

    def versions() -> list[int]:
        return client.beta.agents.get(agent_id=agents["triage"]).versions

    assert versions() == [0]
    attempt(fake, tmp_path, agents["triage"], "versions", kill_after_turn=1)
    assert versions() == [0, 1]  # the functions written into the agent, once
    names = []
    for t in client.beta.agents.get(agent_id=agents["triage"]).tools or ():
        assert isinstance(t, FunctionTool)
        names.append(t.function.name)
    assert sorted(names) == ["find_order", "refund_order"]

    result = attempt(fake, tmp_path, agents["triage"], "versions")
    assert result["status"] == "succeeded" and (result["model_replayed"], result["model_live"]) == (1, 2)
    assert versions() == [0, 1], "the retry made a new version of the agent"
    again = attempt(fake, tmp_path, agents["triage"], "versions-2")
    assert again["status"] == "succeeded" and versions() == [0, 1], "a run with the same tools made a new version"
    assert executed(tmp_path) == {"find_order": 2, "refund_order": 2}  # once per run
