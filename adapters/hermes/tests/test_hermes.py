"""What only Hermes has: its model-discovery probes, its transcript as memory, its built-in tools
and its home directory. The shared conformance suite covers the rest.

Every test runs Hermes' real ``AIAgent`` (its own OpenAI client, streamed Chat Completions)
against the fake provider over HTTP, through the run's loopback proxy.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from run_agent import AIAgent

from tether.errors import ConfigError
from tether.journal import Record, read_records
from tether.progress import read_progress
from tether.run import Run
from tether.stores import LocalStore, open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether.wire.proxy import shared_proxy
from tether_hermes import TOOLSET, HermesAgent, run_agent, tool

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
    found = [r for r in read_records(LocalStore(tmp_path / "store"), run_id) if r.kind == "model"]
    return sorted(found, key=lambda r: r.started_at)


def hermes_agent(**extra) -> HermesAgent:
    def make(**tether: str) -> AIAgent:
        options = {"model": MODEL, "enabled_toolsets": [TOOLSET], "quiet_mode": True, "skip_context_files": True, "skip_memory": True}
        return AIAgent(**{**options, **extra, **tether})

    return HermesAgent(make, tools=[lookup])


async def test_model_discovery_probes_pass_through_unrecorded(fake, tmp_path):
    """Hermes' own discovery calls (``/v1/models``, ``/api/tags``, ``/props``…) made against the
    run's base URL reach the provider, and are neither journaled, nor model turns, nor cost."""
    from agent.model_metadata import detect_local_server_type, fetch_endpoint_model_metadata

    probed: dict[str, Any] = {}

    def make(base_url: str, api_key: str) -> AIAgent:
        probed["models"] = fetch_endpoint_model_metadata(base_url, api_key=api_key, force_refresh=True)
        probed["server"] = detect_local_server_type(base_url, api_key=api_key)
        return hermes_agent().factory(base_url=base_url, api_key=api_key)

    result = await run_agent("What about Paris?", agent=HermesAgent(make, tools=[lookup]), **common(fake, tmp_path, "probes"))
    assert result.status == "succeeded" and "two million" in (result.output or "")
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


ROOT = Path(__file__).resolve().parents[3]
KIT = str(ROOT / "adapters/hermes/tests/kit.py")
#: Two timezones 26 hours apart: the date Hermes writes differs between them at any time of day.
EAST, WEST = "Pacific/Kiritimati", "Etc/GMT+12"
OTHER_KERNEL = "5.4.0-1099-aws"


def system_prompt(body: bytes) -> str:
    text: str = json.loads(body)["messages"][0]["content"]
    return text


async def test_retry_on_another_day_kernel_and_home_slot_replays(tmp_path, monkeypatch):
    """Killed after its second turn (the first tool done), a run retried on another day, with
    another kernel release, user home, working directory and Hermes home slot replays both
    recorded turns with 0 live calls and runs each tool once: Hermes' requests (User-Agent
    ``HermesAgent/``) have those facts normalised out of their fingerprints."""
    from tests.conformance.agents import TOOLS, script_for
    from tests.conformance.driver import load_kit, run_scenario

    tools_log = tmp_path / "tools.jsonl"
    node_a, node_b = tmp_path / "node-a", tmp_path / "node-b"
    for node in (node_a, node_b):
        (node / "tether-hermes").mkdir(parents=True)
    with FakeProvider(Script.from_dict(script_for(load_kit(KIT))), seed=5) as provider:
        args = {"kit": KIT, "scenario": "multi", "run_id": "moved", "store": str(tmp_path / "store"), "origin": provider.url}
        env = {**os.environ, "OPENAI_API_KEY": "sk-test", "TETHER_TOOL_LOG": str(tools_log), "TMPDIR": str(node_a), "HERMES_TIMEZONE": EAST}
        argv = [sys.executable, "-m", "tests.conformance.driver", json.dumps({**args, "kill_after_turn": 2})]
        killed = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert killed.returncode == -9, killed.stderr[-3000:]
        first = [e.body for e in provider.ledger.snapshot()]
        assert len(first) == 2 and provider.live_calls() == 2

        # The retry, in this process: another day, kernel, user home, working directory, and
        # another temporary directory whose slot-0 another Hermes run holds.
        import hermes_time

        monkeypatch.setenv("HERMES_TIMEZONE", WEST)
        monkeypatch.setenv("TETHER_TOOL_LOG", str(tools_log))
        monkeypatch.setenv("HOME", str(tmp_path / "other-home"))
        monkeypatch.setattr(platform, "release", lambda: OTHER_KERNEL)
        monkeypatch.setattr(tempfile, "tempdir", str(node_b))
        monkeypatch.chdir(tmp_path)
        hermes_time.reset_cache()
        try:
            with open(node_b / "tether-hermes" / "slot-0.lock", "w") as held:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                result = await run_scenario(args, TOOLS)
        finally:
            monkeypatch.undo()
            hermes_time.reset_cache()
        assert result["status"] == "succeeded", result
        assert result["model_replayed"] == 2 and result["model_live"] == 1 and provider.live_calls() == 3
        tools = [json.loads(line)["tool"] for line in tools_log.read_text().splitlines()]
        assert tools == ["get_weather", "lookup"]  # get_weather ran in the killed attempt only

        # The retry's prompt really differs: its live third turn names the other facts.
        before, after = system_prompt(first[0]), system_prompt(provider.ledger.snapshot()[-1].body)
        assert OTHER_KERNEL in after and OTHER_KERNEL not in before
        assert str(node_b / "tether-hermes" / "slot-1") in after and str(node_a / "tether-hermes" / "slot-0") in before
        started_before, started_after = (re.search(r"Conversation started: .+", text) for text in (before, after))
        assert started_before and started_after and started_before.group(0) != started_after.group(0)
        progress = read_progress(open_store(str(tmp_path / "store")), "moved")
        assert progress is not None
        assert progress["steps"]["normalisedParts"] >= 3 * 5  # each turn: kernel, home, cwd, Hermes home, date


async def test_the_same_drift_from_another_client_is_not_normalised(fake, tmp_path):
    """Hermes' recorded requests, sent again through the proxy with another day, kernel and
    Hermes home: under Hermes' User-Agent they replay; the same bodies under the OpenAI SDK's
    default User-Agent (any other client) are not normalised and go live."""
    result = await run_agent("What about Paris?", agent=hermes_agent(), **common(fake, tmp_path, "sent"))
    assert result.status == "succeeded"
    sent = [e.body for e in fake.ledger.snapshot()]
    assert len(sent) == 2

    def drifted(body: bytes) -> bytes:
        data = json.loads(body)
        text = data["messages"][0]["content"]
        for old, new in (
            (r"Host: \w+ \([^)]*\)", f"Host: Linux ({OTHER_KERNEL})"),
            (r"live under \S+/profiles/", "live under /var/tmp/tether-hermes/slot-3/profiles/"),
            (r"Conversation started: [^\n]+", "Conversation started: Monday, July 14, 2031"),
        ):
            text, n = re.subn(old, new, text)
            assert n == 1, f"Hermes no longer writes {old!r} into its system prompt: revisit the normalisation"
        data["messages"][0]["content"] = text
        return json.dumps(data).encode()

    async def send(run_id: str, bodies: list[bytes], user_agent: str) -> Run:
        run = Run(run_id, str(tmp_path / "store"), upstreams={"openai": f"{fake.url}/openai"})
        base = shared_proxy().base_url(run, "openai")
        headers = {"user-agent": user_agent, "authorization": "Bearer sk-test", "content-type": "application/json"}
        async with httpx.AsyncClient() as client:
            for body in bodies:
                r = await client.post(f"{base}/v1/chat/completions", content=body, headers=headers)
                assert r.status_code == 200
        await run.aclose()
        return run

    for user_agent, replayed in (("HermesAgent/0.19.0", 2), ("OpenAI/Python 2.24.0", 0)):
        run_id = "ua-" + user_agent.split("/")[0].lower()
        await send(run_id, sent, user_agent)
        calls = fake.live_calls()
        again = await send(run_id, [drifted(b) for b in sent], user_agent)
        assert again.counters.model_replayed == replayed and fake.live_calls() == calls + 2 - replayed, user_agent
