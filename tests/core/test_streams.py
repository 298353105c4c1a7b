"""A streamed answer is recorded whole and durably before the attempt ends, or not at all.

The seam reads a stream upstream in a pump of its own, so a consumer that stops early still gets
the turn recorded; the end of the attempt (``Run.aclose``) waits for those pumps. A process killed
mid-stream has recorded nothing half-way and its next attempt runs the turn live exactly once; an
upstream stream that breaks half-way is recoverable and unrecorded. Real ``openai`` SDK, real
HTTP, the fake provider pausing a stream half-way (``stall``) to hold it open.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tether.journal import Record, read_records
from tether.run import Run
from tether.stores import open_store
from tether.testing import FakeProvider, Fault
from tether.wire.loop import run_on_wire_loop
from tether.wire.proxy import shared_proxy
from tether.wire.transport import AsyncWireTransport, WireTransport

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "A long streamed answer about the weather in Paris, in many small pieces."
Q = [{"role": "user", "content": "What is the weather in Paris?"}]
USAGE = {"include_usage": True}  # without it a streamed chat turn reports no usage: its cost is unknown


@pytest.fixture
def provider():
    with FakeProvider({"conversations": [{"match": "weather", "turns": [{"text": ANSWER}]}]}) as p:
        yield p


def model_records(store: str, scope: str) -> list[Record]:
    return [r for r in read_records(open_store(store), scope) if r.kind == "model"]


def new_run(provider: FakeProvider, store: str, scope: str) -> Run:
    return Run(scope, store, upstreams={"openai": provider.url + "/openai"})


def async_client(run: Run, via: str) -> openai.AsyncOpenAI:
    if via == "proxy":
        return openai.AsyncOpenAI(base_url=shared_proxy().base_url(run, "openai") + "/v1", api_key="k", max_retries=0)
    http = httpx.AsyncClient(transport=AsyncWireTransport("openai", run))
    return openai.AsyncOpenAI(base_url=run.upstreams["openai"] + "/v1", api_key="k", max_retries=0, http_client=http)


async def read_whole(run: Run, via: str) -> str:
    text = ""
    with run.activate():
        async for chunk in await async_client(run, via).chat.completions.create(
            model="gpt-4o-mini", messages=Q, stream=True, stream_options=USAGE
        ):
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
    await run.aclose()
    return text


@pytest.mark.parametrize("via", ["transport", "proxy"])
def test_consumer_closing_early_still_gets_the_turn_recorded_before_the_attempt_ends(provider, tmp_path, via):
    """The consumer reads one chunk and closes; the stream is still arriving (paused upstream).
    When the attempt ends (``run.aclose()`` returns, then the event loop is gone) the whole
    answer is in the journal, counted as a live turn; the next attempt replays all of it."""
    store = str(tmp_path / "store")
    provider.inject(Fault("stall:0.6"))
    run = new_run(provider, store, "early")

    async def first_chunk_then_close() -> None:
        with run.activate():
            stream = await async_client(run, via).chat.completions.create(
                model="gpt-4o-mini", messages=Q, stream=True, stream_options=USAGE
            )
            async for _ in stream:
                break
            await stream.close()
        await run.aclose()

    asyncio.run(first_chunk_then_close())
    [record] = model_records(store, "early")  # no waiting: the end of the attempt waited
    assert record.outcome == "ok" and record.body.count(b"data:") > 3 and b"[DONE]" in record.body
    assert run.counters.model_live == 1 and run.accounting.live.total > 0

    retry = new_run(provider, store, "early")
    assert asyncio.run(read_whole(retry, via)) == ANSWER
    assert provider.live_calls() == 1 and retry.counters.model_replayed == 1


def test_sync_consumer_closing_early_is_recorded_when_the_attempt_ends(provider, tmp_path):
    """The sync transport's pumps run on the wire loop; ``aclose`` on another loop waits for them there."""
    store = str(tmp_path / "store")
    provider.inject(Fault("stall:0.6"))
    run = new_run(provider, store, "sync")
    http = httpx.Client(transport=WireTransport("openai", run))
    client = openai.OpenAI(base_url=run.upstreams["openai"] + "/v1", api_key="k", max_retries=0, http_client=http)
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=Q, stream=True, stream_options=USAGE)
    next(iter(stream))
    stream.close()
    asyncio.run(run.aclose())
    assert len(model_records(store, "sync")) == 1 and run.counters.model_live == 1


def test_stream_broken_half_way_is_not_recorded_and_runs_again(provider, tmp_path):
    store = str(tmp_path / "store")
    provider.inject(Fault("reset"))
    run = new_run(provider, store, "broken")
    with pytest.raises((openai.APIError, httpx.TransportError)):
        asyncio.run(read_whole(run, "transport"))
    assert model_records(store, "broken") == [] and run.counters.model_live == 0
    retry = new_run(provider, store, "broken")
    assert asyncio.run(read_whole(retry, "transport")) == ANSWER
    assert provider.live_calls() == 1 and len(model_records(store, "broken")) == 1


KILLED = """
import asyncio, sys
import httpx, openai
from tether.run import Run
from tether.wire.transport import AsyncWireTransport

async def main(store, origin):
    run = Run("killed", store, upstreams={"openai": origin + "/openai"})
    http = httpx.AsyncClient(transport=AsyncWireTransport("openai", run))
    client = openai.AsyncOpenAI(base_url=origin + "/openai/v1", api_key="k", max_retries=0, http_client=http)
    with run.activate():
        q = [{"role": "user", "content": "What is the weather in Paris?"}]
        async for _ in await client.chat.completions.create(model="gpt-4o-mini", messages=q, stream=True, stream_options={"include_usage": True}):
            print("CHUNK", flush=True)
    await run.aclose()

asyncio.run(main(*sys.argv[1:3]))
"""


def test_process_killed_mid_stream_records_nothing_and_the_next_attempt_runs_it_once(provider, tmp_path):
    store = str(tmp_path / "store")
    provider.inject(Fault("stall:30"))
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED, store, provider.url],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # blocks until the first chunk reached the SDK
        assert line.strip() == "CHUNK", child.stderr.read() if child.stderr else ""
        child.kill()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert model_records(store, "killed") == [], "a half stream was recorded"
    assert provider.live_calls() == 1

    retry = new_run(provider, store, "killed")
    assert asyncio.run(read_whole(retry, "transport")) == ANSWER
    assert provider.live_calls() == 2 and retry.counters.model_live == 1, "the killed turn ran live exactly once"
    [record] = model_records(store, "killed")
    assert record.attempt == 2

    again = new_run(provider, store, "killed")
    assert asyncio.run(read_whole(again, "transport")) == ANSWER
    assert provider.live_calls() == 2 and again.counters.model_replayed == 1


def test_a_pump_past_the_bound_is_cancelled_and_records_nothing(provider, tmp_path):
    """The end of the attempt waits at most ``settle_timeout``: a stream still paused upstream
    then is dropped (never written after the attempt ended); the next attempt runs it again."""
    store = str(tmp_path / "store")
    provider.inject(Fault("stall:2"))
    run = new_run(provider, store, "bound")
    run.seam.writes.settle_timeout = 0.2

    pumps = []

    async def first_chunk_then_close() -> None:
        with run.activate():
            stream = await async_client(run, "proxy").chat.completions.create(
                model="gpt-4o-mini", messages=Q, stream=True, stream_options=USAGE
            )
            async for _ in stream:
                break
            await stream.close()
        pumps.extend(run.seam.writes._pumps)
        started = time.monotonic()
        await run.aclose()
        assert time.monotonic() - started < 1.5

    asyncio.run(first_chunk_then_close())
    assert len(pumps) == 1
    run_on_wire_loop(asyncio.wait(pumps), timeout=10)  # the cancellation lands on the wire loop
    assert pumps[0].cancelled() and model_records(store, "bound") == [] and run.counters.model_live == 0
