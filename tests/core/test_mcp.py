"""MCP at the wire (tether.mcp, README.md "MCP servers"): the official Python SDK's client talking to
a server built with the official Python SDK (tests/support/mcp_ledger.py), over Streamable HTTP
(event-stream and JSON answers) and stdio (through ``tether mcp-relay``). The server writes one
ledger line per side effect, read here from outside: "did not run again" is observed.

Each attempt is a fresh Run of the scope and a fresh MCP session (new JSON-RPC ids, new session)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import tether
from tests.support.mcp_ledger import KEY, charges, free_port, http_server, stdio_command, wait_for_port
from tether import approvals, mcp
from tether.journal import Record, read_records
from tether.run import Run
from tether.stores import open_store

REPO = Path(__file__).resolve().parents[2]
Connect = Callable[[], Any]


def tool_records(store: str, scope: str) -> list[Record]:
    return sorted((r for r in read_records(open_store(store), scope) if r.kind == "tool"), key=lambda r: r.started_at)


async def attempt(
    store: str,
    scope: str,
    connect: Connect,
    calls: list[tuple[str, dict]],
    *,
    reads: int = 0,
    meta: dict | None = None,
    counted: list[tuple[int, int]] | None = None,
) -> list:
    """One attempt: a Run of ``scope``, a new MCP session, ``reads`` tools/list first (so the
    calls' JSON-RPC ids differ from the last attempt's), then the calls in order. ``counted``
    gets the attempt's (live, replayed) tool calls, as its status and cost report count them."""
    run = Run(scope, store)
    mcp.serve(run)
    try:
        with run.activate():
            async with Client(connect()) as client:
                for _ in range(reads):
                    await client.list_tools()
                return [await client.call_tool(name, args, meta=meta) for name, args in calls]
    finally:
        await run.aclose()
        if counted is not None:
            counted.append((run.counters.tool_live, run.counters.tool_replayed))


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


CALLS = [("charge", {"customer": "alice", "amount": 5}), ("refund", {"customer": "alice"})]


def check_replayed(first: list, second: list, ledger: Path, store: str) -> None:
    assert text(first[0]) == text(second[0]) == "charged alice 5 cents" and not first[0].is_error
    assert first[1].is_error and second[1].is_error and text(first[1]) == text(second[1])
    assert len(charges(ledger)) == 1 and len(charges(ledger, "refund")) == 1  # each ran once, in the first attempt
    records = tool_records(store, "s")
    assert [(r.response["tool"], r.outcome) for r in records] == [("mcp:ledger/charge", "ok"), ("mcp:ledger/refund", "error")]
    assert records[0].request == {"tool": "mcp:ledger/charge", "version": "", "arguments": {"amount": 5, "customer": "alice"}}
    assert re.fullmatch(r"[0-9a-f]{32}", charges(ledger)[0]["key"])  # the idempotency key, in _meta


def through(url: str, in_process: bool) -> Any:
    """The SDK client's transport to the server at ``url`` through Tether: the proxy's URL, or the
    same URL with ``tether.mcp_http_client()`` (served in the client's task, no loopback hop)."""
    if in_process:
        return streamable_http_client(tether.mcp_url(url, name="ledger"), http_client=tether.mcp_http_client())
    return tether.mcp_url(url, name="ledger")


@pytest.mark.parametrize("in_process", [False, True], ids=["proxy", "in-process"])
@pytest.mark.parametrize("json_response", [False, True], ids=["event-stream", "json"])
async def test_http_tools_call_runs_once_and_its_answers_replay(tmp_path: Path, json_response: bool, in_process: bool) -> None:
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    with http_server(ledger, json_response=json_response) as server:

        def connect() -> Any:
            return through(server.url, in_process)

        counted: list[tuple[int, int]] = []
        first = await attempt(store, "s", connect, CALLS, counted=counted)
        second = await attempt(store, "s", connect, CALLS, reads=2, meta={"progressToken": "another"}, counted=counted)
    check_replayed(first, second, ledger, store)
    assert counted == [(2, 0), (0, 2)]  # counted like Tether tools: live, then replayed


async def test_stdio_server_through_the_relay_runs_once_and_its_answers_replay(tmp_path: Path) -> None:
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    command, *args = stdio_command(ledger)
    params = tether.mcp_stdio(command, args, name="ledger")
    assert params["args"][:3] == ["-m", "tether", "mcp-relay"]

    def connect() -> StdioServerParameters:
        return StdioServerParameters(**params)

    counted: list[tuple[int, int]] = []
    first = await attempt(store, "s", connect, CALLS, counted=counted)
    second = await attempt(store, "s", connect, CALLS, reads=2, counted=counted)
    check_replayed(first, second, ledger, store)
    assert counted == [(2, 0), (0, 2)]


async def test_a_broken_connection_is_not_recorded_and_the_retry_carries_the_same_idempotency_key(tmp_path: Path) -> None:
    """The server does the charge, then dies before answering (a node lost mid-call): nothing is
    recorded, the next attempt calls again, and the server sees the same idempotency key twice
    (so a server that keeps its keys could answer the retry without charging again)."""
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    with http_server(ledger, env={"LEDGER_SLOW_S": "60"}) as server:
        call = asyncio.ensure_future(attempt(store, "s", lambda: tether.mcp_url(server.url, name="ledger"), CALLS[:1]))
        for _ in range(600):
            if charges(ledger) or call.done():
                break
            await asyncio.sleep(0.05)
        assert len(charges(ledger)) == 1
        server.process.kill()
        with pytest.raises(BaseException):  # noqa: B017 (the SDK's own error type for a failed request)
            await call
    assert tool_records(store, "s") == []
    with http_server(ledger) as server:  # another port: the name keys the steps, not the URL
        [result] = await attempt(store, "s", lambda: tether.mcp_url(server.url, name="ledger"), CALLS[:1])
    assert text(result) == "charged alice 5 cents"
    first, retry = charges(ledger)
    assert first["key"] == retry["key"] is not None
    assert [r.outcome for r in tool_records(store, "s")] == ["ok"]


async def test_a_json_rpc_error_reaches_the_client_and_is_recorded(tmp_path: Path) -> None:
    """The server's JSON-RPC error (here the 2026 protocol's 400, invalid params: the request lacks
    the client's capabilities in _meta) is the call's answer: recorded, and replayed with its status."""
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "charge", "arguments": {"customer": "bob", "amount": 1}}}
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "charge",
    }
    answers = []
    with http_server(ledger) as server:
        # No approval asked: the tools/list that would say whether charge is destructive fails as the call does.
        tether.mcp_url(server.url, name="ledger", destructive_needs_approval=False)
        for attempt_id in (1, 2):
            run = Run("s", store)
            try:
                async with httpx.AsyncClient() as client:
                    url = mcp._proxy().mcp_url(run, "ledger", server.url)
                    answers.append(await client.post(url, json={**body, "id": attempt_id}, headers=headers))
            finally:
                await run.aclose()
    first, second = answers
    assert first.status_code == second.status_code == 400
    assert first.json()["error"] == second.json()["error"] and first.json()["error"]["code"] == -32602
    assert "clientCapabilities" in first.json()["error"]["message"]
    assert second.json()["id"] == 2  # the replay answers this request's id
    assert [(r.response["tool"], r.outcome) for r in tool_records(store, "s")] == [("mcp:ledger/charge", "error")]
    assert charges(ledger) == []


async def test_without_a_run_requests_reach_the_server_unjournaled(tmp_path: Path) -> None:
    """An MCP client used before its run starts (or after it ended): its calls go to the server
    as they would without Tether, and nothing is written anywhere."""
    ledger = tmp_path / "ledger.jsonl"
    with http_server(ledger) as server:
        url = tether.mcp_url(server.url, name="ledger")
        assert "/r/active/mcp/ledger/" in url
        for _ in range(2):
            async with Client(url) as client:
                await client.call_tool(*CALLS[0])
        async with Client(streamable_http_client(url, http_client=tether.mcp_http_client())) as client:
            await client.call_tool(*CALLS[0])
    assert len(charges(ledger)) == 3


async def test_the_in_process_client_sends_other_urls_out_and_refuses_an_unknown_run(tmp_path: Path) -> None:
    """``tether.mcp_http_client()`` serves only the URLs mcp_url handed out: any other URL is an
    ordinary request (here the server itself, straight), and a run no longer served gets the
    proxy's own 404, not a journal of another run."""
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    with http_server(ledger) as server:
        async with Client(streamable_http_client(server.url, http_client=tether.mcp_http_client())) as client:
            assert text(await client.call_tool(*CALLS[0])) == "charged alice 5 cents"
        run = Run("gone", store)
        url = mcp._proxy().mcp_url(run, "ledger", server.url)
        await run.aclose()
        mcp._proxy().unregister(run)
        async with tether.mcp_http_client() as http:
            answer = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "charge"}})
    assert answer.status_code == 404 and "unknown run" in answer.text
    assert len(charges(ledger)) == 1 and tool_records(store, "gone") == []


#: One attempt in a process where aiohttp cannot be imported (the default install has none: it
#: is the cli extra's), in process and through the proxy.
_NO_AIOHTTP = """
import asyncio, sys
sys.modules["aiohttp"] = None
from tests.core.test_mcp import CALLS, attempt, text, through

async def main() -> None:
    for in_process in (True, False):
        [result] = await attempt(sys.argv[1], f"s-{in_process}", lambda: through(sys.argv[2], in_process), CALLS[:1])
        print(text(result))

asyncio.run(main())
"""


def test_the_in_process_client_and_the_proxy_need_no_aiohttp(tmp_path: Path) -> None:
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    with http_server(ledger) as server:
        proc = subprocess.run([sys.executable, "-c", _NO_AIOHTTP, store, server.url], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "charged alice 5 cents\n" * 2
    assert len(charges(ledger)) == 2
    assert [r.outcome for r in tool_records(store, "s-True") + tool_records(store, "s-False")] == ["ok", "ok"]


def test_server_names_and_urls_are_checked() -> None:
    assert mcp.server_name("https://mcp.shop.example:8443/v1/mcp", None) == "mcp.shop.example-8443-v1-mcp"
    with pytest.raises(ValueError, match="letters, digits"):
        tether.mcp_url("https://mcp.shop.example/mcp", name="shop/eu")
    with pytest.raises(ValueError, match="not an http"):
        tether.mcp_url("stdio://server", name="x")


def test_the_relay_refuses_a_missing_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "mcp-relay", "--via", "http://127.0.0.1:1/r/x/mcp/y"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "the server's command is missing" in proc.stderr


def test_the_ledger_server_is_a_real_sdk_server(tmp_path: Path) -> None:
    """The server answers the SDK's own client directly (no Tether): what the tests above compare with."""
    ledger = tmp_path / "ledger.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [*stdio_command(ledger)[:-1], "http", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, proc)

        async def call() -> str:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                return text(await client.call_tool(*CALLS[0]))

        assert asyncio.run(call()) == "charged alice 5 cents"
    finally:
        proc.kill()
        proc.wait()
    assert charges(ledger)[0]["key"] is None and json.dumps(charges(ledger)[0]["meta"]).find(KEY) == -1


async def test_a_url_that_follows_the_active_run_refuses_a_call_when_two_runs_are_active(tmp_path: Path) -> None:
    """Two runs served in one process: a URL built before either cannot tell whose call it is, so
    the call is refused (409) rather than journaled in the wrong run; the server never sees it."""
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    runs = [Run("a", store), Run("b", store)]
    with http_server(ledger) as server:
        url = tether.mcp_url(server.url, name="ledger")
        for run in runs:
            mcp.serve(run)
        try:
            async with httpx.AsyncClient() as client:
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "charge", "arguments": {"customer": "x", "amount": 1}},
                }
                answer = await client.post(url, json=body, headers={"accept": "application/json, text/event-stream"})
        finally:
            for run in runs:
                await run.aclose()
    assert answer.status_code == 409 and "at most one active run" in answer.text
    assert charges(ledger) == [] and tool_records(store, "a") == tool_records(store, "b") == []


@pytest.mark.parametrize("decision", ["approve", "decline"])
async def test_a_destructive_tool_waits_for_a_human_and_the_server_hears_it_only_once_approved(tmp_path: Path, decision: str) -> None:
    """``void`` carries no annotations, so MCP's defaults make it destructive: the call asks a
    human (the run is marked suspended, the client gets a failure, the server hears nothing);
    approved, the next attempt sends it once; declined, the model gets the refusal as the tool's
    error and the server never hears it. ``charge`` (not destructive) is called without asking."""
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    calls = [("charge", {"customer": "alice", "amount": 5}), ("void", {"customer": "alice"})]
    with http_server(ledger) as server:
        run = Run("s", store)
        mcp.serve(run)
        try:
            with run.activate():
                async with Client(through(server.url, in_process=True)) as client:
                    assert not (await client.call_tool(*calls[0])).is_error
                    with pytest.raises(Exception, match="waiting for approval"):
                        await client.call_tool(*calls[1])
        finally:
            await run.aclose()
        assert run.suspended is not None and run.suspended.tool == "mcp:ledger/void" and run.stopping
        assert charges(ledger, "void") == [] and len(charges(ledger)) == 1
        (request,) = approvals.list_approvals(open_store(store), "s")
        assert request["prompt"] == "Call void of MCP server ledger, which it marks destructive?"
        approvals.decide(open_store(store), "s", request["id"], decision == "approve", by="alice")
        first = await attempt(store, "s", lambda: through(server.url, in_process=False), calls)
        again = await attempt(store, "s", lambda: through(server.url, in_process=False), calls)
    assert len(charges(ledger)) == 1  # replayed both times
    if decision == "approve":
        assert text(first[1]) == text(again[1]) == "voided alice" and len(charges(ledger, "void")) == 1
    else:
        assert first[1].is_error and "declined by a human reviewer" in text(first[1]) and again[1].is_error
        assert charges(ledger, "void") == []


async def test_approval_for_every_call_and_no_approval_for_destructive_tools_when_the_policy_says_so(tmp_path: Path) -> None:
    """``approval=`` asks before every call of the server's tools (even one it marks not
    destructive), with the prompt given; ``destructive_needs_approval=False`` calls a destructive one at once."""
    ledger, store = tmp_path / "ledger.jsonl", str(tmp_path / "store")
    with http_server(ledger) as server:
        run = Run("every", store)
        mcp.serve(run)
        try:
            with run.activate():
                url = tether.mcp_url(server.url, name="ledger", approval="Charge {customer} {amount} cents?")
                async with Client(url) as client:
                    with pytest.raises(Exception, match="waiting for approval"):
                        await client.call_tool("charge", {"customer": "bob", "amount": 3})
        finally:
            await run.aclose()
        [request] = approvals.list_approvals(open_store(store), "every")
        assert request["prompt"] == "Charge bob 3 cents?" and charges(ledger) == []

        run = Run("trusted", store)
        mcp.serve(run)
        try:
            with run.activate():
                async with Client(tether.mcp_url(server.url, name="ledger", destructive_needs_approval=False)) as client:
                    assert text(await client.call_tool("void", {"customer": "bob"})) == "voided bob"
        finally:
            await run.aclose()
    assert run.suspended is None and approvals.list_approvals(open_store(store), "trusted") == []
    assert len(charges(ledger, "void")) == 1
