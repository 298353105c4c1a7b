"""Live answers handed back while their records are written (``Run(overlap_writes=True)``, what
``run_agent`` uses): what follows from an answer waits until it is durable.

In process, with a store whose model-record writes wait at a gate (a fault injector over the real
local store): the SDK gets the answer while the write waits; the answer is not counted yet; a tool
call the answer asked for does not start until the write is durable; a failed write stops the
attempt (no tool runs, nothing more goes upstream). Across processes: ``chat_loop`` SIGKILLed right
after the SDK got an answer, on a local store and on a real S3 server — the retry either replays
that turn or asks the model again, never runs a tool twice, and the journal holds no corrupt
record.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.s3 import new_bucket, s3_server, set_aws_env
from tether.errors import RecoverableStepError, StoreUnavailable
from tether.journal import read_records
from tether.run import Run
from tether.stores import LocalStore, open_store
from tether.testing import FakeProvider
from tether.tools import ToolSpec, call_tool
from tether.wire.transport import AsyncWireTransport

SCRIPT = {
    "conversations": [
        {
            "match": "weather",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "lookup", "arguments": {"topic": "rain"}},
                    ]
                },
                {"text": "Sunny:", "text_from_tool_results": True},
            ],
        }
    ]
}
QUESTION = "what is the weather in Paris?"


class GatedStore(LocalStore):
    """The real local store; journal writes (records, tail writes and appends, pack; not the
    attempt's load: its claim and takeover of the tail) wait until ``gate`` is set, then fail if ``fail``."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.loading = True  # until a Run over it has loaded
        self.gate = threading.Event()
        self.fail = False
        self.written_at: list[float] = []

    def _gated(self, key: str) -> bool:
        if self.loading or not key.startswith("journal/") or "/attempts/" in key:
            return False
        assert self.gate.wait(30)
        if self.fail:
            raise StoreUnavailable("injected: the store is down")
        return True

    def create(self, key: str, data: bytes) -> bool:
        gated = self._gated(key)
        created = super().create(key, data)
        if gated:
            self.written_at.append(time.monotonic())
        return created

    def put(self, key: str, data: bytes) -> None:
        gated = self._gated(key)
        super().put(key, data)
        if gated:
            self.written_at.append(time.monotonic())

    def append_if(self, key: str, data: bytes, version: str) -> str | None:
        gated = self._gated(key)
        token = super().append_if(key, data, version)
        if gated:
            self.written_at.append(time.monotonic())
        return token


@pytest.fixture(scope="module")
def provider():
    with FakeProvider(SCRIPT) as p:
        yield p


def client_for(run: Run) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=AsyncWireTransport("openai", run))
    return openai.AsyncOpenAI(base_url=run.upstreams["openai"] + "/v1", api_key="sk-test", http_client=http, max_retries=0)


async def ask(client: openai.AsyncOpenAI) -> Any:
    messages = [{"role": "user", "content": QUESTION}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]
    return await asyncio.wait_for(client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools), 30)


def test_a_tool_waits_for_the_answer_that_asked_for_it(provider, tmp_path):
    store = GatedStore(tmp_path)
    ran_at: list[float] = []

    async def get_weather(city: str) -> str:
        ran_at.append(time.monotonic())
        return "sunny"

    async def scenario() -> None:
        run = Run("gated", store, upstreams={"openai": provider.url + "/openai"}, overlap_writes=True)
        store.loading = False
        client = client_for(run)
        with run.activate():
            answer = await ask(client)  # handed back while its record waits at the gate
            assert answer.choices[0].message.tool_calls[0].function.name == "get_weather"
            assert run.counters.model_live == 0 and store.written_at == [], "counted before it was durable"
            call = asyncio.ensure_future(call_tool(ToolSpec("get_weather", get_weather), {"city": "Paris"}))
            for _ in range(50):  # let the call get as far as it can
                await asyncio.sleep(0)
            assert not call.done() and ran_at == [], "the tool ran before the answer that asked for it was durable"
            store.gate.set()
            assert await asyncio.wait_for(call, 30) == "sunny"
        assert run.counters.model_live == 1 and run.counters.tool_live == 1
        assert ran_at[0] > store.written_at[0]
        await client.close()
        await run.aclose()

    asyncio.run(scenario())


def test_a_failed_write_stops_the_attempt(provider, tmp_path, monkeypatch):
    monkeypatch.setenv("TETHER_STORE_OUTAGE_SECONDS", "0")  # past the bound at once (tests/core/test_store_outage.py waits)
    store = GatedStore(tmp_path)
    store.fail = True
    ran: list[str] = []

    async def get_weather(city: str) -> str:
        ran.append(city)
        return "sunny"

    async def scenario() -> None:
        run = Run("failing", store, upstreams={"openai": provider.url + "/openai"}, overlap_writes=True)
        store.loading = False
        client = client_for(run)
        with run.activate():
            await ask(client)
            store.gate.set()  # the write fails
            with pytest.raises(RecoverableStepError, match="could not be recorded"):
                await call_tool(ToolSpec("get_weather", get_weather), {"city": "Paris"})
            calls = len(provider.ledger)
            with pytest.raises(openai.APIConnectionError):
                await ask(client)
            assert len(provider.ledger) == calls, "a live turn went upstream after a lost write"
        assert ran == [] and run.counters.model_live == 0
        await client.close()
        await run.aclose()

    asyncio.run(scenario())


def test_an_answer_nothing_follows_is_written_soon(provider, tmp_path):
    """A record waits for the loop to turn to it (the next request, a tool, the end of the
    attempt) at most ``WRITE_DELAY``: an answer after which the framework does nothing with
    Tether for a while (long CPU work, a human) is durable anyway."""
    from tether.wire.seam import WRITE_DELAY

    store = GatedStore(tmp_path)
    store.gate.set()

    async def scenario() -> None:
        run = Run("quiet", store, upstreams={"openai": provider.url + "/openai"}, overlap_writes=True)
        store.loading = False
        client = client_for(run)
        with run.activate():
            await ask(client)
            handed_back = time.monotonic()
            for _ in range(400):  # nothing waits for the record: only the timer starts its write
                if run.counters.model_live:
                    break
                await asyncio.sleep(0.005)
            assert run.counters.model_live == 1, "the answer's record was never written"
            assert store.written_at[0] - handed_back >= WRITE_DELAY * 0.5, "written before the loop turned to it"
        await client.close()
        await run.aclose()

    asyncio.run(scenario())


def test_the_next_request_starts_the_earlier_write(tmp_path, monkeypatch):
    """With the delay out of reach, the next request going upstream is what starts the write of
    the answer before it: it is durable while that request waits for the model, not after."""
    import tether.wire.writes as writes

    monkeypatch.setattr(writes, "WRITE_DELAY", 60.0)
    store = GatedStore(tmp_path)
    store.gate.set()

    async def scenario(provider: FakeProvider) -> None:
        run = Run("next", store, upstreams={"openai": provider.url + "/openai"}, overlap_writes=True)
        store.loading = False
        client = client_for(run)
        with run.activate():
            await ask(client)
            await asyncio.sleep(0.2)
            assert store.written_at == [], "written before anything asked for it (the delay is 60 s)"
            second = time.monotonic()
            await ask(client)  # the model takes 1 s
            assert store.written_at and store.written_at[0] - second < 0.5, "the earlier answer waited for the next one"
        await asyncio.wait_for(run.seam.recorded(), 5)  # the end of the attempt starts the last one
        assert run.counters.model_live == 2
        await client.close()
        await run.aclose()

    with FakeProvider(SCRIPT, latency=1.0) as slow:
        asyncio.run(scenario(slow))


# -- killed right after an answer, in a real process ----------------------------------------------
def chat_loop(store: str, scope: str, provider: FakeProvider, tool_log: Path, *, kill_on_answer: int = 0) -> dict[str, Any] | None:
    argv = ["--store", store, "--scope", scope, "--upstream", provider.url + "/openai", "--question", QUESTION]
    argv += ["--overlap-writes", "--tool-sleep", "lookup=0.02"]
    if kill_on_answer:
        argv += ["--kill-on-answer", str(kill_on_answer)]
    env = {**os.environ, "TETHER_TOOL_LOG": str(tool_log)}
    done = subprocess.run([sys.executable, "-m", "tether.testing.chat_loop", *argv], capture_output=True, text=True, env=env, timeout=120)
    if kill_on_answer:
        assert done.returncode == -9, done.stderr[-2000:]
        return None
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_kill_on_answer(store_url: str, provider: FakeProvider, tmp_path: Path) -> list[int]:
    """Per kill point: the killed attempt's answer is replayed or asked again; tools run once.
    Returns the retries' live model calls (a turn asked again, plus the turns never reached)."""
    live_again = []
    for answer in (1, 2):
        scope, log = f"killed-{answer}", tmp_path / f"tools-{answer}.log"
        assert chat_loop(store_url, scope, provider, log, kill_on_answer=answer) is None
        before = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        assert before == [] if answer == 1 else len(before) == 2  # answer 1 asked for the tools: none ran yet
        out = chat_loop(store_url, scope, provider, log)
        assert out is not None and out["answer"].startswith("Sunny:") and out["corrupt"] == 0
        assert out["model_live"] + out["model_replayed"] == 2
        assert out["model_live"] in ((1, 2) if answer == 1 else (0, 1))  # replayed, or asked again
        executions = [json.loads(line)["key"] for line in log.read_text().splitlines()]
        assert len(executions) == 2 and len(set(executions)) == 2, "a tool ran twice"
        assert out["tool_live"] + out["tool_replayed"] == 2 and out["tool_live"] == (2 if answer == 1 else 0)
        assert len(read_records(open_store(store_url), scope)) == 4
        live_again.append(out["model_live"])
    return live_again


def test_killed_right_after_an_answer_local(provider, tmp_path):
    check_kill_on_answer(str(tmp_path / "store"), provider, tmp_path)


def test_killed_right_after_an_answer_s3(provider, tmp_path):
    set_aws_env()
    with s3_server() as endpoint:
        url = f"s3://{new_bucket(endpoint)}/overlap?endpoint_url={endpoint}"
        live_again = check_kill_on_answer(url, provider, tmp_path)
    # On S3 the write takes a round trip: the kill lands before it, so the retry asks the killed
    # turn again (after answer 1: turn 1 again and turn 2; after answer 2: turn 2 again).
    assert live_again == [2, 1]
