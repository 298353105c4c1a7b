"""Approval before cache (README.md, "How it works": Approvals, Tool seam): a tool that requires approval never
returns a result cached by an earlier run without a decision; every new call needs one. Within a
run, a completed approved call replays (the journal) without asking again.

Through `run_agent` with the OpenAI Agents SDK adapter (in the `openai` test environment, as a
child process) against the fake provider, and at the tool seam for the explicit opt-in.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from tether.errors import ConfigError, Suspended
from tether.run import Run
from tether.testing.fake_provider import FakeProvider
from tether.tools import ToolSpec, call_tool

REPO = Path(__file__).resolve().parents[2]

AGENT = textwrap.dedent(
    """
    import asyncio, json, sys
    from tether import Tool, load_adapter, run_agent
    from tether.approvals import decide, list_approvals
    from tether.errors import ConfigError
    from tether.stores import open_store

    store, upstream = sys.argv[1], sys.argv[2]
    refunds = []

    def lookup_order(order: str) -> str:
        return f"Order {order}: 40 USD, damaged."

    def issue_refund(order: str, amount: int) -> str:
        refunds.append((order, amount))
        return f"Refunded {amount} USD on order {order}."

    tools = [Tool(lookup_order, name="lookup-order"), Tool(issue_refund, name="issue-refund", approval="Refund {amount} on {order}?")]

    async def run(run_id):
        r = await run_agent(load_adapter("openai"), "Order A1 arrived damaged, please refund it.", tools=tools,
                            model="gpt-4o-mini", provider="openai", run_id=run_id, store=store, upstreams={"openai": upstream})
        return {"status": r.status, "refunds": len(refunds), "tool_replayed": r.tool_replayed}

    async def main():
        out = {"first": await run("first")}
        (request,) = list_approvals(open_store(store), "first")
        decide(open_store(store), "first", request["id"], True, by="alice")
        out["first-approved"] = await run("first")
        out["first-again"] = await run("first")
        out["second"] = await run("second")
        try:
            Tool(issue_refund, name="issue-refund", cache="auto", approval=True)
        except ConfigError as e:
            out["refused"] = str(e)
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _openai_python() -> str:
    venv = subprocess.run([str(REPO / "scripts" / "env.sh"), "openai"], check=True, capture_output=True, text=True).stdout.split()[-1]
    return f"{venv}/bin/python"


def test_every_run_asks_through_run_agent(tmp_path: Path) -> None:
    script = yaml.safe_load((REPO / "examples" / "openai" / "refund.script.yaml").read_text())
    with FakeProvider(script) as fake:
        proc = subprocess.run(
            [_openai_python(), "-c", AGENT, str(tmp_path / "store"), fake.url + "/openai"],
            capture_output=True,
            text=True,
            timeout=300,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENAI_API_KEY": "fake-key", "OPENAI_AGENTS_DISABLE_TRACING": "1"},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["first"] == {"status": "suspended", "refunds": 0, "tool_replayed": 0}
    assert out["first-approved"]["status"] == "succeeded" and out["first-approved"]["refunds"] == 1
    # the same run again: the approved refund replays from the journal, nobody is asked
    assert out["first-again"]["status"] == "succeeded" and out["first-again"]["refunds"] == 1
    assert out["first-again"]["tool_replayed"] == 2
    # another run with the same arguments waits for its own decision
    assert out["second"] == {"status": "suspended", "refunds": 1, "tool_replayed": 0}
    assert "cached_without_approval=True" in out["refused"]


async def test_cached_result_skips_approval_only_when_opted_in(tmp_path: Path) -> None:
    calls: list[int] = []

    def refund(amount: int) -> str:
        calls.append(amount)
        return f"refunded {amount}"

    with pytest.raises(ConfigError, match="cached_without_approval"):
        ToolSpec("refund", refund, cache="auto", approval=True)
    spec = ToolSpec("refund", refund, cache="auto", approval=True, cached_without_approval=True)
    store = str(tmp_path / "store")
    with pytest.raises(Suspended):
        await call_tool(spec, {"amount": 5}, run=Run("one", store))
    from tether.approvals import decide, list_approvals
    from tether.stores import open_store

    (request,) = list_approvals(open_store(store), "one")
    decide(open_store(store), "one", request["id"], True)
    assert await call_tool(spec, {"amount": 5}, run=Run("one", store)) == "refunded 5"
    # opted in: run two gets run one's cached result without a decision and without a call
    assert await call_tool(spec, {"amount": 5}, run=Run("two", store)) == "refunded 5"
    assert calls == [5] and list_approvals(open_store(store), "two") == []


async def test_an_approval_id_cannot_be_known_before_its_request(tmp_path: Path) -> None:
    """Issue 22: an id was a hash of tool, version and arguments, so a decision could be prepared
    for a call nobody had asked about yet. Now each request draws a nonce: two runs making the
    same call get different ids, and an id computed from the call is refused."""
    from tether.approvals import decide, list_approvals
    from tether.canonical import sha256_hex
    from tether.stores import open_store
    from tether.tools import _step

    calls: list[int] = []

    def refund(amount: int) -> str:
        calls.append(amount)
        return f"refunded {amount}"

    spec = ToolSpec("refund", refund, approval=True)
    store_url = str(tmp_path / "store")
    store = open_store(store_url)
    asked: dict[str, str] = {}
    for run_id in ("one", "two"):
        with pytest.raises(Suspended) as suspended:
            await call_tool(spec, {"amount": 4000}, run=Run(run_id, store_url))
        asked[run_id] = suspended.value.approval_id
    assert asked["one"] != asked["two"], "the same call in two runs got the same approval id"
    assert [r["id"] for r in list_approvals(store, "one")] == [asked["one"]]

    # What an attacker computes from the call alone (the step key: tool, version, arguments, occurrence).
    computed = sha256_hex(f"tool/{_step(spec, {'amount': 4000})[1]}/1".encode())[:12]
    assert asked["one"].startswith(computed)  # the step's slot: computable, but not the id
    for attempt in (computed, asked["two"]):  # computed, or another run's
        with pytest.raises(ConfigError, match="has no approval request"):
            decide(store, "one", attempt, True, by="mallory")
    with pytest.raises(Suspended) as again:  # a later attempt of the step finds the same request
        await call_tool(spec, {"amount": 4000}, run=Run("one", store_url))
    assert again.value.approval_id == asked["one"] and calls == []

    decide(store, "one", asked["one"], True, by="alice")
    assert await call_tool(spec, {"amount": 4000}, run=Run("one", store_url)) == "refunded 4000"
    with pytest.raises(Suspended):  # run two still waits for its own decision
        await call_tool(spec, {"amount": 4000}, run=Run("two", store_url))
    assert calls == [4000]
