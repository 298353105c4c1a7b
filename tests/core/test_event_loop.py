"""Store I/O never blocks the event loop (issue 8, item 5).

A run goes through everything that touches the store — journal load, live model turns, tool
calls, an approval request and, on the next attempt, the approval poll, memory load and commit,
progress writes, a sync tool with a blocking client — against the real S3 server (moto on loopback) with 50 ms added before every S3
request (a botocore ``before-send`` hook: the request still goes out over HTTP). asyncio's own
slow-callback detection watches the loop: no callback of Tether's run may take over 20 ms.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

import tether
from tests.core.chat_adapter import ADAPTER
from tether.agent import run_agent, tool
from tether.approvals import decide, list_approvals
from tether.memory import Memory
from tether.progress import read_progress
from tether.stores import open_store
from tether.testing import FakeProvider

LATENCY_S = 0.05
SLOW_S = 0.02
TETHER_CODE = str(Path(tether.__file__).parent)
STORE_CODE = str(Path(tether.__file__).parent / "stores")

SCRIPT = {
    "conversations": [
        {
            "match": "refund:",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"order": "A1"}}]},
                {"tool_calls": [{"name": "issue_refund", "arguments": {"order": "A1", "amount": 20}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        }
    ]
}


@tool
def lookup(order: str) -> str:
    """Look an order up (a sync tool with a blocking client)."""
    time.sleep(LATENCY_S)
    return f"order {order}: 20 USD, paid"


@tool(approval="Refund {amount} USD on order {order}?")
async def issue_refund(order: str, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount} USD on {order}"


class SlowCallbacks(logging.Handler):
    """asyncio's "Executing <handle> took N seconds" warnings (debug mode), with when they ended."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.found: list[tuple[float, float, str]] = []  # (start, end, message)

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if took := re.search(r"^Executing .* took ([0-9.]+) seconds$", message, re.S):
            self.found.append((record.created - float(took.group(1)), record.created, message))


class LoopSampler(threading.Thread):
    """Samples the event loop thread's stack every millisecond and keeps the moments it was in
    store code (Tether's stores or botocore) or in a sync tool: whose work a slow callback was."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.loop_thread = threading.get_ident()
        self.blocking: list[tuple[float, str]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.001):
            frame = sys._current_frames().get(self.loop_thread)
            summary = traceback.extract_stack(frame) if frame else []
            stack, names = [f.filename for f in summary], {f.name for f in summary}
            if any(STORE_CODE in f or "/botocore/" in f for f in stack) or "lookup" in names:
                self.blocking.append((time.time(), " <- ".join(Path(f).name for f in reversed(stack[-8:]))))


@pytest.fixture
def s3_latency(s3_store_url):
    """Every S3 request of this process waits 50 ms before it is sent; counts the requests."""
    client = open_store(s3_store_url).client  # the process-wide client every S3 store uses
    sent: list[str] = []

    def delay(request, **_):
        sent.append(request.method)
        time.sleep(LATENCY_S)

    client.meta.events.register("before-send.s3", delay)
    yield s3_store_url, sent
    client.meta.events.unregister("before-send.s3", delay)


async def _scenario(store: str, fake: FakeProvider, run_id: str, memory_key: str):
    common = dict(model="gpt-4o-mini", tools=[lookup, issue_refund], store=store, run_id=run_id, memory_key=memory_key)
    common["upstreams"] = {"openai": fake.url + "/openai"}
    # Each attempt is a task of its own, so asyncio names run_agent (Tether's code) in its reports.
    first = await asyncio.create_task(run_agent(ADAPTER, "refund: order A1 please", **common))
    assert first.status == "suspended"
    [request] = await asyncio.to_thread(list_approvals, open_store(store), run_id)
    await asyncio.to_thread(decide, open_store(store), run_id, request["id"], True, by="alice")
    return await asyncio.create_task(run_agent(ADAPTER, "refund: order A1 please", **common))


async def test_store_io_never_blocks_the_event_loop(s3_latency):
    store, sent = s3_latency
    loop = asyncio.get_running_loop()
    with FakeProvider(SCRIPT, seed=5) as fake:
        await _scenario(store, fake, "warm-up", "warm")  # first-use costs (imports, clients) aside
        slow, sampler = SlowCallbacks(), LoopSampler()
        logging.getLogger("asyncio").addHandler(slow)
        debug, threshold = loop.get_debug(), loop.slow_callback_duration
        loop.set_debug(True)
        loop.slow_callback_duration = SLOW_S
        before = len(sent)
        sampler.start()
        try:
            done = await _scenario(store, fake, "refund-1", "customer-1")
        finally:
            sampler.stopped.set()
            sampler.join()
            loop.set_debug(debug)
            loop.slow_callback_duration = threshold
            logging.getLogger("asyncio").removeHandler(slow)
    # The run really went through the store on S3, with latency, and through every path.
    assert done.status == "succeeded" and done.output == 'Done: "refunded 20 USD on A1"'
    assert (done.model_replayed, done.model_live, done.tool_replayed, done.tool_live) == (2, 1, 1, 1)
    assert len(sent) - before >= 20, "the scenario should make many S3 requests"
    assert len(await asyncio.to_thread(Memory(open_store(store), "default", "customer-1").load)) == 6
    assert (await asyncio.to_thread(read_progress, open_store(store), "refund-1"))["phase"] == "Succeeded"
    # A slow callback is Tether's blocking I/O if it ran in Tether's run (its task names Tether's
    # code) while the loop thread was seen in store code or in the sync tool. On a shared machine a callback can take
    # over 20 ms for other reasons (CPU, the GIL, debug mode); those are not what this pins.
    ours = [m for t0, t1, m in slow.found if TETHER_CODE in m and any(t0 <= t <= t1 for t, _ in sampler.blocking)]
    assert not ours, f"{len(ours)} callbacks over {SLOW_S * 1000:.0f} ms blocking the loop:\n" + "\n".join(m[:400] for m in ours)
    assert not sampler.blocking, "the event loop thread ran store code or a sync tool:\n" + "\n".join(
        sorted({w for _, w in sampler.blocking})
    )
