"""What only Hermes has: its model-discovery probes, its transcript as memory, its built-in tools
and its home directory. The shared conformance suite covers the rest.

Every test runs Hermes' real ``AIAgent`` (its own OpenAI client, streamed Chat Completions)
against the fake provider over HTTP, through the run's loopback proxy.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_agent import AIAgent
from tether_hermes import TOOLSET, HermesAgent, run_agent, tool

from tether.errors import ConfigError
from tether.journal import Record
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script

MODEL = "gpt-4o-mini"
executions: list[str] = []


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the knowledge base."""
    executions.append(f"lookup:{topic}")
    return f"{topic} is a city of two million people."


SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Found:"},
            ],
        }
    ]
}


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    executions.clear()


@pytest.fixture
def fake():
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        yield provider


def common(fake: FakeProvider, tmp_path: Path, run_id: str) -> dict:
    return {"run_id": run_id, "store": str(tmp_path / "store"), "upstreams": {"openai": f"{fake.url}/openai"}}


def records(tmp_path: Path, run_id: str) -> list[Record]:
    root = tmp_path / "store" / "journal" / run_id / "model"
    return sorted((Record.decode(p.read_bytes()) for p in root.glob("*.rec")), key=lambda r: r.started_at)


def hermes_agent(**extra) -> HermesAgent:
    def make(**tether: str) -> AIAgent:
        options = {"model": MODEL, "enabled_toolsets": [TOOLSET], "quiet_mode": True, "skip_context_files": True, "skip_memory": True}
        return AIAgent(**{**options, **extra, **tether})

    return HermesAgent(make, tools=[lookup])


async def test_model_discovery_probes_pass_through_unrecorded(fake, tmp_path):
    """Hermes' own discovery calls (``/v1/models``, ``/api/tags``, ``/props``…) made against the
    run's base URL reach the provider, and are neither journaled, nor model turns, nor cost."""
    from agent.model_metadata import detect_local_server_type, fetch_endpoint_model_metadata

    probed: dict[str, object] = {}

    def make(base_url: str, api_key: str) -> AIAgent:
        probed["models"] = fetch_endpoint_model_metadata(base_url, api_key=api_key, force_refresh=True)
        probed["server"] = detect_local_server_type(base_url, api_key=api_key)
        return hermes_agent().factory(base_url=base_url, api_key=api_key)

    result = await run_agent("What about Paris?", agent=HermesAgent(make, tools=[lookup]), **common(fake, tmp_path, "probes"))
    assert result.status == "succeeded" and "two million" in result.output
    assert MODEL in probed["models"]  # the provider's model list came through the seam
    assert probed["server"] is None  # the fake provider is none of the local servers Hermes probes for
    assert result.model_live == 2 and fake.live_calls() == 2
    assert [r.request["path"] for r in records(tmp_path, "probes")] == ["/v1/chat/completions"] * 2
    assert sum(result.usage_live.values()) > 0 and result.cost_usd > 0
    again = await run_agent("What about Paris?", agent=HermesAgent(make, tools=[lookup]), **common(fake, tmp_path, "probes"))
    assert again.model_replayed == 2 and again.model_live == 0 and again.cost_usd == 0 and fake.live_calls() == 2


async def test_memory_is_the_full_transcript(fake, tmp_path):
    """A memory key keeps Hermes' whole transcript — the assistant's tool calls and the tool
    results too — and the next run sends all of it to the model."""
    first = await run_agent("memory: what about Paris?", agent=hermes_agent(), memory_key="ada", **common(fake, tmp_path, "m1"))
    assert first.status == "succeeded"
    store = open_store(str(tmp_path / "store"))
    [segment] = store.list("memory/default/ada/segments/")
    items = json.loads(store.get(segment) or b"[]")
    roles = [m["role"] for m in items]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert items[1]["tool_calls"][0]["function"]["name"] == "lookup"
    assert "two million" in items[2]["content"]
    second = await run_agent("memory: and now?", agent=hermes_agent(), memory_key="ada", **common(fake, tmp_path, "m2"))
    assert second.status == "succeeded"
    sent = records(tmp_path, "m2")[0].request["body"]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "tool", "assistant", "user"]
    assert any(m.get("tool_calls") for m in sent) and "two million" in json.dumps(sent)


async def test_declarative_agent_has_no_hermes_built_in_tools(fake, tmp_path):
    result = await run_agent("What about Paris?", model=MODEL, tools=[lookup], **common(fake, tmp_path, "decl"))
    assert result.status == "succeeded"
    sent = records(tmp_path, "decl")[0].request["body"]["tools"]
    assert [t["function"]["name"] for t in sent] == ["lookup"]
    assert executions == ["lookup:Paris"]


async def test_hermes_default_of_every_built_in_tool_is_refused(fake, tmp_path):
    """``enabled_toolsets=None`` is Hermes' "every toolset" (terminal, files, web…): refused."""
    with pytest.raises(ConfigError, match="must name its toolsets"):
        await run_agent("What about Paris?", agent=hermes_agent(enabled_toolsets=None), **common(fake, tmp_path, "all"))
    assert fake.live_calls() == 0


async def test_an_agent_that_bypasses_the_seam_is_refused(fake, tmp_path):
    def own_endpoint(**tether: str) -> AIAgent:
        return AIAgent(base_url=f"{fake.url}/openai/v1", api_key="sk-test", model=MODEL, enabled_toolsets=[TOOLSET], quiet_mode=True)

    with pytest.raises(ConfigError, match="must pass base_url"):
        await run_agent("What about Paris?", agent=own_endpoint, **common(fake, tmp_path, "bypass"))
    assert fake.live_calls() == 0


async def test_a_tool_named_like_a_hermes_built_in_is_refused(fake, tmp_path):
    @tool(name="terminal")
    def shadow(command: str) -> str:
        """Not Hermes' terminal."""
        return command

    with pytest.raises(ConfigError, match="Hermes built-in"):
        await run_agent("What about Paris?", model=MODEL, tools=[shadow], **common(fake, tmp_path, "shadow"))


async def test_hermes_never_reaches_the_network_and_keeps_no_host_state(fake, tmp_path):
    """Every connection a run opens is to loopback (the proxy, the fake provider), and each
    attempt's Hermes home is fresh and gone afterwards."""
    connects: list[str] = []

    def audit(event: str, args: tuple) -> None:
        if event == "socket.connect" and isinstance(args[1], tuple) and args[1]:
            connects.append(str(args[1][0]))

    sys.addaudithook(audit)
    homes: list[Path] = []

    def make(**tether: str) -> AIAgent:
        from hermes_constants import get_hermes_home

        homes.append(get_hermes_home())
        assert not (get_hermes_home() / "state.db").exists()  # nothing left by an earlier attempt
        return hermes_agent().factory(**tether)

    for _ in range(2):
        result = await run_agent("What about Paris?", agent=HermesAgent(make, tools=[lookup]), **common(fake, tmp_path, "net"))
        assert result.status == "succeeded"
    assert connects and all(ipaddress.ip_address(host).is_loopback for host in connects), connects
    assert homes[0] == homes[1] and not homes[0].exists()


def test_sub_agent_turns_replay_in_a_new_process_after_a_crash_mid_delegation(tmp_path):
    """Killed after a ``delegate_task`` sub-agent's first turn (the delegation unfinished), the
    next process runs the delegation again and the sub-agent's finished turn replays: its prompt
    names the same Hermes home as before."""
    from tests.conformance.agents import script_for
    from tests.conformance.driver import load_kit

    root = Path(__file__).resolve().parents[3]
    kit_path = str(root / "adapters/hermes/tests/kit.py")
    with FakeProvider(Script.from_dict(script_for(load_kit(kit_path))), seed=5) as provider:
        args = {"kit": kit_path, "scenario": "delegate", "run_id": "deleg", "store": str(tmp_path / "store"), "origin": provider.url}
        env = {**os.environ, "OPENAI_API_KEY": "sk-test", "TETHER_TOOL_LOG": str(tmp_path / "tools.jsonl")}

        def attempt(kill_after_turn: int) -> subprocess.CompletedProcess:
            argv = [sys.executable, "-m", "tests.conformance.driver", json.dumps({**args, "kill_after_turn": kill_after_turn})]
            return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=300)

        killed = attempt(2)  # the coordinator's first turn, then the sub-agent's first
        assert killed.returncode == -9, killed.stderr[-3000:]
        assert provider.live_calls() == 2
        done = attempt(0)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "succeeded" and "sunny" in result["output"]
    assert result["model_replayed"] == 2  # the coordinator's turn and the sub-agent's
    assert result["model_live"] == 2 and provider.live_calls() == 4
