"""MCP at the wire against the official TypeScript reference server no one here wrote,
``@modelcontextprotocol/server-everything`` from npm (scripts/mcp-everything.sh caches it; the
suite installs it from scripts/test.sh), over Streamable HTTP and stdio, with the official Python
SDK's client.

The server keeps no ledger, so "did not run again" is observed by time and by its process: the
long-running tool sleeps ``duration`` seconds sending progress notifications before its answer (an
event stream over HTTP), and each attempt talks to a new server process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import tether
from tests.core.test_mcp import text, tool_records
from tests.support.mcp_ledger import free_port, wait_for_port
from tether import mcp
from tether.run import Run

REPO = Path(__file__).resolve().parents[2]
LONG = ("trigger-long-running-operation", {"duration": 2, "steps": 4})
CALLS = [("get-sum", {"a": 2, "b": 3}), LONG, ("get-sum", {"a": "two", "b": 3})]


@pytest.fixture(scope="module")
def everything() -> str:
    """The server's executable: ``$TETHER_MCP_EVERYTHING`` (scripts/test.sh exports it), else the
    cached install (scripts/mcp-everything.sh installs it on first use)."""
    if path := os.environ.get("TETHER_MCP_EVERYTHING"):
        return path
    proc = subprocess.run([str(REPO / "scripts" / "mcp-everything.sh")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@contextmanager
def http_everything(executable: str) -> Any:
    port = free_port()
    proc = subprocess.Popen(
        [executable, "streamableHttp"], env={**os.environ, "PORT": str(port)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


async def attempt(store: str, connect: Callable[[], Any]) -> tuple[list[Any], float]:
    """One attempt of run ``s`` with a new session; returns the answers and the long call's seconds."""
    run = Run("s", store)
    mcp.serve(run)
    try:
        with run.activate():
            async with Client(connect()) as client:
                answers = []
                for name, args in CALLS:
                    started = time.monotonic()
                    answers.append(await client.call_tool(name, args))
                    if name == LONG[0]:
                        long_s = time.monotonic() - started
                return answers, long_s
    finally:
        await run.aclose()


def check(store: str, first: tuple[list[Any], float], second: tuple[list[Any], float]) -> None:
    (a1, long1), (a2, long2) = first, second
    assert text(a1[0]) == text(a2[0]) and "5" in text(a1[0])
    assert long1 >= 2.0 and long2 < 1.0, (long1, long2)  # live it takes its 2 s; the retry replays it
    assert text(a1[1]) == text(a2[1]) and "completed" in text(a1[1]).lower()
    assert a1[2].is_error and a2[2].is_error and text(a1[2]) == text(a2[2])  # invalid arguments: the tool's error, replayed
    records = tool_records(store, "s")
    assert [(r.response["tool"], r.outcome) for r in records] == [
        ("mcp:everything/get-sum", "ok"),
        ("mcp:everything/trigger-long-running-operation", "ok"),
        ("mcp:everything/get-sum", "error"),
    ]


async def test_http(tmp_path: Path, everything: str) -> None:
    store = str(tmp_path / "store")
    answers = []
    for _ in range(2):
        with http_everything(everything) as url:  # a new server process for each attempt
            answers.append(await attempt(store, lambda url=url: tether.mcp_url(url, name="everything")))
    check(store, *answers)


@pytest.mark.parametrize("in_process", [False, True], ids=["proxy", "in-process"])
async def test_progress_notifications_reach_the_client_during_a_journaled_call(tmp_path: Path, everything: str, in_process: bool) -> None:
    """The long-running tool sends a progress notification per step before its answer: through
    Tether the client sees each one while the call runs (its answer is recorded and comes last);
    the replay answers at once, with no progress (nothing runs)."""
    store = str(tmp_path / "store")
    seen: list[list[tuple[float, float]]] = []
    with http_everything(everything) as url:
        for _ in range(2):
            run = Run("s", store)
            mcp.serve(run)
            progress: list[tuple[float, float]] = []

            async def on_progress(done: float, total: float | None, message: str | None, progress: list = progress) -> None:
                progress.append((done, time.monotonic()))

            try:
                with run.activate():
                    target = tether.mcp_url(url, name="everything")
                    connect = streamable_http_client(target, http_client=tether.mcp_http_client()) if in_process else target
                    async with Client(connect) as client:
                        answer = await client.call_tool(*LONG, progress_callback=on_progress)
                        ended = time.monotonic()
            finally:
                await run.aclose()
            assert "completed" in text(answer).lower()
            seen.append([(done, ended - at) for done, at in progress])
    live, replayed = seen
    assert [done for done, _ in live] == [1, 2, 3, 4]  # every step's notification, in order
    assert live[0][1] >= 1.0  # the first came while the call ran (1.5 s before its answer), not with it
    assert replayed == []
    assert [(r.response["tool"], r.outcome) for r in tool_records(store, "s")] == [("mcp:everything/trigger-long-running-operation", "ok")]


async def test_stdio(tmp_path: Path, everything: str) -> None:
    store = str(tmp_path / "store")
    params = tether.mcp_stdio(everything, ["stdio"], name="everything")
    answers = [await attempt(store, lambda: StdioServerParameters(**params)) for _ in range(2)]
    check(store, *answers)


TASK_CALL = {"name": "simulate-research-query", "arguments": {"topic": "durable agents"}, "task": {"ttl": 300000}}

#: An attempt that starts the task-augmented call through Tether (the loopback proxy), prints the
#: task's handle once it is recorded, and waits until it is killed.
TASK_ATTEMPT = """
import asyncio, json, sys
import httpx
import tether
from tests.core.test_mcp_everything import rpc, open_session, TASK_CALL
from tether import mcp
from tether.run import Run

async def main():
    run = Run("task", sys.argv[1])
    mcp.serve(run)
    with run.activate():
        url = tether.mcp_url(sys.argv[2], name="everything")
        async with httpx.AsyncClient(timeout=60) as http:
            session = await open_session(http, url)
            created = await rpc(http, url, session, "tools/call", TASK_CALL)
            print(json.dumps({"task": created["result"]["task"], "session": session}), flush=True)
            await asyncio.sleep(600)

asyncio.run(main())
"""


async def rpc(http: Any, url: str, session: str | None, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One JSON-RPC request as an MCP client sends it over Streamable HTTP; its response."""
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    if session:
        headers["mcp-session-id"] = session
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params is not None else {})}
    response = await http.post(url, json=body, headers=headers)
    answer = mcp.answer_of(response.content, response.headers.get("content-type", ""), 1)
    assert answer is not None, (response.status_code, response.text[:500])
    return answer


async def open_session(http: Any, url: str) -> str:
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "tasks-test", "version": "1"}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    response = await http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, headers=headers)
    session = response.headers["mcp-session-id"]
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**headers, "mcp-session-id": session})
    return str(session)


async def test_a_task_killed_while_it_runs_is_polled_on_resume_not_called_again(tmp_path: Path, everything: str) -> None:
    """MCP tasks (2025-11-25): the reference server's ``simulate-research-query`` runs as a task
    (4 s). The attempt that called it is killed while it runs, after its handle was recorded; the
    resume, in a new session, replays the handle (the same task) and its polls reach the session
    the task lives in: it gets the report of the one task the server ran."""
    store = str(tmp_path / "store")
    with http_everything(everything) as url:
        child = subprocess.Popen(
            [sys.executable, "-c", TASK_ATTEMPT, store, url],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            first = json.loads(child.stdout.readline() or "null") or pytest.fail(child.stderr.read() if child.stderr else "")
        finally:
            child.kill()
            child.wait(10)
        assert first["task"]["status"] == "working"

        run = Run("task", store)
        mcp.serve(run)
        try:
            with run.activate():
                through = tether.mcp_url(url, name="everything")
                async with httpx.AsyncClient(timeout=60) as http:
                    session = await open_session(http, through)
                    assert session != first["session"]
                    created = await rpc(http, through, session, "tools/call", TASK_CALL)
                    task_id = created["result"]["task"]["taskId"]
                    for _ in range(100):
                        status = (await rpc(http, through, session, "tasks/get", {"taskId": task_id}))["result"]["status"]
                        if status == "completed":
                            break
                        await asyncio.sleep(0.2)
                    report = await rpc(http, through, session, "tasks/result", {"taskId": task_id})
        finally:
            await run.aclose()
        async with httpx.AsyncClient(timeout=60) as http:  # the server, asked directly in the first session
            listed = await rpc(http, url, first["session"], "tasks/list", {})
    assert task_id == first["task"]["taskId"]  # replayed: not called again
    assert status == "completed" and "Research Report: durable agents" in report["result"]["content"][0]["text"]
    assert [t["taskId"] for t in listed["result"]["tasks"]] == [task_id]  # the server ran one task
    [record] = tool_records(store, "task")
    assert record.request["tool"] == "mcp:everything/simulate-research-query" and record.request["version"] == "task"
    assert "tether.dev/task-session" not in json.dumps(created)
