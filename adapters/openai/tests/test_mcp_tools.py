"""AgentTools that are MCP servers (``spec.mcp``, tether.mcptool), with the OpenAI Agents SDK and a
real MCP server built with the official Python SDK (tests/support/mcp_server.py) over Streamable
HTTP and stdio. The server counts its calls in a file.

- ``tether run`` of a manifest with such an AgentTool, killed after the MCP tool's effect: the
  tool ran once, the resumed attempt replays the finished turn and call (no live re-call);
- a tool the server marks destructive waits for a human, and runs once approved;
- laid out as the Kubernetes executor lays a runner pod out (tests/support/tool_runner_pod.py):
  the tool runner is the MCP client and holds the header from the Secret; the agent's process
  (environment, files, memory), its store and what it sent the model never do; the model is offered
  the allowed tools only, with the schema from ``tools/list``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import tether
from tests.support.tool_runner_pod import MODEL_KEY, Pod, finish, free_port, memory_holds, stop, wait_file
from tether.contract import EXIT_SUCCEEDED
from tether.testing.fake_provider import FakeProvider

REPO = Path(__file__).resolve().parents[3]
SERVER = REPO / "tests" / "support" / "mcp_server.py"
TOKEN = "mcp-tok-3c1f9a7e66b2-runner-only"
AUTH_SHA = hashlib.sha256(f"Bearer {TOKEN}".encode()).hexdigest()[:12]


def effects(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The MCP server on Streamable HTTP, refusing requests without the token (HTTP 401)."""
    port, seen = free_port(), tmp_path / "server-effects.jsonl"
    env = {**os.environ, "MCP_EXPECTED": TOKEN}
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(port), str(seen)], env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.time() + 60
    while True:
        try:
            import httpx

            httpx.get(url, timeout=1)
            break
        except httpx.HTTPError:
            assert proc.poll() is None and time.time() < deadline, "the MCP server did not start"
            time.sleep(0.1)
    try:
        yield url, seen
    finally:
        stop(proc)  # type: ignore[arg-type]


def manifest(tmp_path: Path, mcp: dict[str, Any], turns: list[dict[str, Any]], **tool: Any) -> Path:
    run = {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": "hotel-run"},
        "spec": {
            "framework": "openai",
            "model": {"name": "gpt-4o-mini", "provider": "openai"},
            "instructions": "You book hotel rooms.",
            "input": "Book room 101 for two nights.",
            "tools": ["hotel"],
            "retries": 2,
        },
    }
    agent_tool = {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentTool",
        "metadata": {"name": "hotel"},
        "spec": {"description": "The hotel's booking system.", "mcp": mcp, **tool},
    }
    path = tmp_path / "hotel.yaml"
    path.write_text(yaml.safe_dump_all([run, agent_tool], sort_keys=False))
    (tmp_path / "hotel.script.yaml").write_text(yaml.safe_dump({"conversations": [{"match": "", "turns": turns}]}))
    return path


BOOK: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "book", "arguments": {"room": "101", "nights": 2}}]},
    {"text_from_tool_results": True, "text": "Done:"},
]


def outcome(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def check_killed_and_resumed(proc: subprocess.CompletedProcess[str], seen: Path) -> dict[str, Any]:
    out = proc.stdout
    assert "killing the agent process after step 2" in out, out + proc.stderr
    assert outcome(proc)["exit_code"] == 0, out + proc.stderr
    attempt2 = out.split("attempt 2:")[1]
    # The finished turn and the MCP call replay; only the last turn is live.
    assert len(re.findall(r"step +\d+ +replayed", attempt2)) == 2, attempt2
    assert len(re.findall(r"step +\d+ +live", attempt2)) == 1, attempt2
    assert "booked 101 for 2 night(s)" in out
    [call] = effects(seen)  # the side effect happened once
    assert call["tool"] == "book" and call["arguments"] == {"room": "101", "nights": 2}
    assert call["idempotency_key"] and len(call["idempotency_key"]) == 32
    return call


def test_http_mcp_tool_killed_after_its_effect_runs_once(tmp_path: Path, http_server: tuple[str, Path]) -> None:
    url, seen = http_server
    mcp = {
        "url": url,
        "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hotel", "key": "token"}}],
        "tools": ["book", "lookup"],
    }
    secrets = json.dumps({"tools": {"hotel": {"Authorization": f"Bearer {TOKEN}"}}})
    proc = tether("run", str(manifest(tmp_path, mcp, BOOK)), "--kill-after", "2", store=tmp_path / "store", env={"TETHER_SECRETS": secrets})
    call = check_killed_and_resumed(proc, seen)
    assert call["auth_sha"] == AUTH_SHA  # the header from the Secret reached the server
    assert TOKEN not in proc.stdout + proc.stderr
    assert not any(TOKEN.encode() in p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file())


def test_stdio_mcp_tool_killed_after_its_effect_runs_once(tmp_path: Path) -> None:
    seen = tmp_path / "server-effects.jsonl"
    mcp = {"command": [sys.executable, str(SERVER), "stdio", str(seen)], "tools": ["book"]}
    env = [{"name": "MCP_TOKEN", "secretKeyRef": {"name": "hotel", "key": "token"}}]
    secrets = json.dumps({"tools": {"hotel": {"MCP_TOKEN": TOKEN}}})
    proc = tether(
        "run", str(manifest(tmp_path, mcp, BOOK, env=env)), "--kill-after", "2", store=tmp_path / "store", env={"TETHER_SECRETS": secrets}
    )
    call = check_killed_and_resumed(proc, seen)
    # The server process saw the tool's env Secret, and none of the runtime's own variables.
    assert call["env_token_sha"] == hashlib.sha256(TOKEN.encode()).hexdigest()[:12]


def test_a_destructive_mcp_tool_waits_for_approval(tmp_path: Path, http_server: tuple[str, Path]) -> None:
    """``cancel`` carries no annotations: by MCP's defaults it is destructive, so the run asks a
    human first and the server hears nothing until the decision; approved, it runs once."""
    url, seen = http_server
    mcp = {"url": url, "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hotel", "key": "token"}}], "tools": ["cancel"]}
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "cancel", "arguments": {"booking": "B7"}}]},
        {"text_from_tool_results": True, "text": "Done:"},
    ]
    path, store = manifest(tmp_path, mcp, turns), tmp_path / "store"
    env = {"TETHER_SECRETS": json.dumps({"tools": {"hotel": {"Authorization": f"Bearer {TOKEN}"}}})}
    first = tether("run", str(path), store=store, env=env)
    assert outcome(first)["exit_code"] == 3 and "Waiting for approval" in first.stdout, first.stdout + first.stderr
    assert "which it marks destructive" in first.stdout
    assert effects(seen) == []
    run_id, approval_id = re.search(r"tether approve (\S+) (\w+) --yes", first.stdout).groups()  # type: ignore[union-attr]
    assert tether("approve", run_id, approval_id, "--yes", "--by", "alice", store=store).returncode == 0
    done = tether("run", str(path), store=store, env=env)
    assert outcome(done)["exit_code"] == 0, done.stdout + done.stderr
    assert [c["tool"] for c in effects(seen)] == ["cancel"] and "cancelled B7" in done.stdout


def test_destructive_without_approval_when_the_agent_tool_says_so(tmp_path: Path, http_server: tuple[str, Path]) -> None:
    url, seen = http_server
    mcp = {
        "url": url,
        "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hotel", "key": "token"}}],
        "tools": ["cancel"],
        "destructiveNeedsApproval": False,
    }
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "cancel", "arguments": {"booking": "B7"}}]},
        {"text_from_tool_results": True, "text": "Done:"},
    ]
    env = {"TETHER_SECRETS": json.dumps({"tools": {"hotel": {"Authorization": f"Bearer {TOKEN}"}}})}
    proc = tether("run", str(manifest(tmp_path, mcp, turns)), store=tmp_path / "store", env=env)
    assert outcome(proc)["exit_code"] == 0, proc.stdout + proc.stderr
    assert [c["tool"] for c in effects(seen)] == ["cancel"]


def test_an_object_parameter_reaches_the_framework_and_the_server_as_listed(tmp_path: Path, http_server: tuple[str, Path]) -> None:
    """A tool whose input schema has a nested object and an enum: the SDK's strict schema accepts
    the signature built from it, and the server gets the model's arguments as JSON."""
    url, seen = http_server
    mcp = {"url": url, "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hotel", "key": "token"}}], "tools": ["find"]}
    arguments = {"filter": {"city": "Oslo", "stars": 4}, "sort": "price"}
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "find", "arguments": arguments}]},
        {"text_from_tool_results": True, "text": "Found:"},
    ]
    env = {"TETHER_SECRETS": json.dumps({"tools": {"hotel": {"Authorization": f"Bearer {TOKEN}"}}})}
    proc = tether("run", str(manifest(tmp_path, mcp, turns)), store=tmp_path / "store", env=env)
    assert outcome(proc)["exit_code"] == 0, proc.stdout + proc.stderr
    [call] = effects(seen)
    assert (call["tool"], call["arguments"]) == ("find", arguments) and "Oslo: 2 rooms, by price" in proc.stdout


POD_SCRIPT = {
    "conversations": [
        {
            "match": "book:",
            "turns": [
                {"tool_calls": [{"name": "book", "arguments": {"room": "101", "nights": 2}}]},
                {"tool_calls": [{"name": "fail", "arguments": {}}, {"name": "verify", "arguments": {"code": "X9"}}]},
                {"tool_calls": [{"name": "pause", "arguments": {}}]},
                {"text_from_tool_results": True, "text": "Booked:"},
            ],
        }
    ]
}


def mcp_pod(tmp_path: Path, fake_url: str, url: str) -> Pod:
    """A runner pod whose AgentTool `hotel` is the MCP server at ``url``: the header's Secret in the
    runner's secrets directory only; `pause` (in the agent's process) holds the agent still."""
    pod = Pod(tmp_path, fake_url, "book: room 101", test_adapter=False)
    request = json.loads(pod.request.read_text())
    request["spec"]["tools"] = ["hotel", "pause"]
    request["tools"] = {
        "hotel": {
            "description": "The hotel's booking system.",
            "mcp": {
                "url": url,
                "headers": [{"name": "Authorization", "secretKeyRef": {"name": "hotel", "key": "token"}}],
                "tools": ["book", "fail", "verify"],
            },
        },
        "pause": request["tools"]["pause"],
    }
    pod.request.write_text(json.dumps(request))
    (pod.tool_secrets / "tools" / "hotel").mkdir(parents=True)
    (pod.tool_secrets / "tools" / "hotel" / "Authorization").write_text(f"Bearer {TOKEN}")
    return pod


def test_the_runner_is_the_mcp_client_and_the_agent_never_holds_the_header(tmp_path: Path, http_server: tuple[str, Path]) -> None:
    url, seen = http_server
    with FakeProvider(POD_SCRIPT, seed=5) as fake:
        pod = mcp_pod(tmp_path, fake.url, url)
        runner = pod.runner("hotel")
        pause = tmp_path / "paused"
        try:
            agent = pod.agent("hotel", PAUSE=str(pause))
            wait_file(pause, agent)  # after the MCP calls, inside an in-process tool of the agent
            pid = int(pause.read_text())
            assert TOKEN.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
            assert not memory_holds(pid, TOKEN.encode()), "the MCP server's header is in the agent's memory"
            assert memory_holds(pid, MODEL_KEY.encode()), "the scan finds the agent's own key (it works)"
            assert memory_holds(runner.pid, TOKEN.encode()), "the runner holds the header"
            (tmp_path / "paused.released").touch()
            code, result, err = finish(agent)
            assert code == EXIT_SUCCEEDED, err
            offered = {t["name"]: t for t in json.loads(fake.ledger[0].body)["tools"]}
            sent = b"".join(e.body for e in fake.ledger)
            live = fake.live_calls()
            # A second attempt of the finished run replays every call: neither the runner nor the server hears one.
            code, again, err = finish(pod.agent("hotel"))
            assert code == EXIT_SUCCEEDED, err
            assert again["tool_live"] == 0 and again["tool_replayed"] == 4 and fake.live_calls() == live
        finally:
            stop(runner)
    calls = effects(seen)
    assert sorted(c["tool"] for c in calls) == ["book", "fail", "verify"] and all(c["auth_sha"] == AUTH_SHA for c in calls)
    assert {c["pid"] for c in calls} != {pid}
    # The model is offered the allowed tools (secret_admin, lookup, cancel are not), with tools/list's schema.
    assert set(offered) == {"book", "fail", "verify", "pause"}
    assert offered["book"]["description"] == "Book a room for some nights."
    assert {k: v["type"] for k, v in offered["book"]["parameters"]["properties"].items()} == {"room": "string", "nights": "integer"}
    # The server's error answers (an isError result, a JSON-RPC error) reached the model as the
    # tool's errors, and are recorded.
    assert b"the hotel is closed" in sent and b"booked 101 for 2 night(s)" in sent
    assert b"unknown booking code X9 (JSON-RPC error -32602)" in sent
    assert sorted(r["outcome"] for r in pod.tool_records()) == ["error", "error", "ok", "ok"]
    # The header is in nothing the agent has, wrote or sent.
    assert sorted(str(p.relative_to(pod.agent_secrets)) for p in pod.agent_secrets.rglob("*") if p.is_file()) == ["model/apiKey"]
    assert TOKEN.encode() not in pod.store_bytes() and TOKEN.encode() not in sent
    assert result["tool_live"] == 4
    # Status shows each MCP tool's annotations (the operator mirrors this record into status.mcpTools).
    from tether.contract import Progress
    from tether.progress import read_progress
    from tether.stores import open_store

    progress = Progress.model_validate(read_progress(open_store(str(pod.store)), pod.run_id))
    assert [t.wire() for t in progress.mcp_tools] == [
        {"name": "book", "agentTool": "hotel", "readOnly": False, "destructive": False, "idempotent": True, "approval": False},
        {"name": "fail", "agentTool": "hotel", "readOnly": True, "destructive": False, "idempotent": False, "approval": False},
        {"name": "verify", "agentTool": "hotel", "readOnly": True, "destructive": False, "idempotent": False, "approval": False},
    ]


def test_an_mcp_server_that_is_down_is_recoverable_and_records_nothing(tmp_path: Path) -> None:
    """Its runner is up, the server is not: the attempt fails recoverably (exit 1), no call is
    recorded, so the next attempt asks again."""
    with FakeProvider(POD_SCRIPT, seed=5) as fake:
        pod = mcp_pod(tmp_path, fake.url, f"http://127.0.0.1:{free_port()}/mcp")
        runner = pod.runner("hotel")
        try:
            code, _, err = finish(pod.agent("hotel"))
        finally:
            stop(runner)
    assert code == 1, err
    assert "MCP server of AgentTool hotel" in err and "failed listing its tools" in err
    assert pod.tool_records() == []


def test_calls_share_one_session_and_a_stdio_server_is_one_process(tmp_path: Path) -> None:
    """The tool side holds its MCP session: a stdio server started for the first call serves the
    next ones (a server that keeps state between calls keeps it); the idempotency key of each
    call reaches the server in ``_meta``."""
    import asyncio

    from tether.api import McpServer
    from tether.mcptool import McpClient

    seen = tmp_path / "effects.jsonl"
    server = McpServer.model_validate({"command": [sys.executable, str(SERVER), "stdio", str(seen)], "tools": ["book", "lookup"]})
    client = McpClient("hotel", server, {"MCP_TOKEN": TOKEN})

    async def calls() -> list[Any]:
        first = await client.call("book", {"room": "7"}, "key-1")
        rest = await asyncio.gather(client.call("lookup", {"city": "Oslo"}, "key-2"), client.call("book", {"room": "8"}, "key-3"))
        return [first, *rest]

    assert asyncio.run(calls()) == ["booked 7 for 1 night(s)", "Oslo: rooms 101, 102", "booked 8 for 1 night(s)"]
    made = effects(seen)
    assert len({c["pid"] for c in made}) == 1  # one server process
    assert sorted(c["idempotency_key"] for c in made) == ["key-1", "key-2", "key-3"]
