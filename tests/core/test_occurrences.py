"""A transient failure never shifts occurrence keys (journal.py: occurrences count recorded outcomes).

Every wire protocol, through its real SDK over real HTTP against the fake provider: a 429, a 503,
a timeout or a reset hits the first turn; the SDK's own retry (retries on) or the agent retrying
the failed step in the same attempt (retries off) then gets the answer. The next attempt must
replay every turn that got a 2xx, or a terminal 4xx (replayed as the same error), with zero
upstream calls. One test crosses a process boundary per protocol; the rest run attempts in-process
(a new ``Run`` loads the journal again and claims the next attempt, as a new process does).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.core import sdk_exchange
from tests.core.sdk_exchange import EXCHANGES, PROVIDER, connect
from tether.journal import Record, read_records
from tether.run import Run
from tether.stores import open_store
from tether.testing import FakeProvider, Fault

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "It is sunny in Paris."
SCRIPT = {
    "conversations": [
        {"match": "weather", "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, {"text": ANSWER}]}
    ]
}
PROTOCOLS = ["openai-chat", "openai-responses", "anthropic", "gemini", "mistral-chat"]
FAULTS = ["status:429", "status:503", "timeout", "reset"]
#: The SDK's timeout in the timeout cases, and how late the slow answer comes: far enough apart that
#: a CPU-starved client still gives up first (at load ~60 its 0.4 s timer fired after a 1.2 s answer
#: had been recorded, and the answer it then gave up on was a third record).
SDK_TIMEOUT, SLOW = 0.4, 2.0


@pytest.fixture
def provider():
    with FakeProvider(SCRIPT) as p:
        yield p


@pytest.fixture
def sdk():
    """Set how the SDK clients are built (``sdk_exchange.SDK``) for one test."""
    saved = dict(sdk_exchange.SDK)

    def configure(retries: bool, timeout: float | None = None) -> None:
        sdk_exchange.SDK.update(retries=2 if retries else 0, timeout=timeout)

    yield configure
    sdk_exchange.SDK.update(saved)


def status_of(error: BaseException) -> int | None:
    """The HTTP status an SDK error carries (each SDK names it differently), or None."""
    for name in ("status_code", "code"):
        value = getattr(error, name, None)
        if isinstance(value, int):
            return value
    return None


async def attempt(run: Run, protocol: str, stream: bool, via: str, *, retry_step: bool) -> str:
    """One attempt of the two-turn exchange. ``retry_step``: a failure other than a terminal 400
    is retried once within the attempt, as an agent framework retries a failed step."""
    http, base = connect(run, protocol, via)
    try:
        with run.activate():
            for tries in (1, 2):
                try:
                    return await EXCHANGES[protocol](http, base, stream)
                except Exception as e:
                    if tries == 2 or not retry_step or status_of(e) == 400:
                        raise
            raise AssertionError("unreachable")
    finally:
        await run.aclose()


def new_run(provider: FakeProvider, store: str, scope: str, protocol: str) -> Run:
    p = PROVIDER[protocol]
    return Run(scope, store, upstreams={p: f"{provider.url}/{p}"})


def records(store: str, scope: str) -> list[Record]:
    return sorted((r for r in read_records(open_store(store), scope) if r.kind == "model"), key=lambda r: r.started_at)


def inject(provider: FakeProvider, fault: str, protocol: str) -> None:
    provider.inject(Fault(f"slow_first_byte:{SLOW}" if fault == "timeout" else fault, match_protocol=protocol))


CASES = [(p, s, r, f) for p in PROTOCOLS for s in (False, True) for r in (True, False) for f in FAULTS]


def _id(case) -> str:
    p, s, r, f = case
    return f"{p}-{'stream' if s else 'plain'}-{'sdk-retries' if r else 'no-retries'}-{f.replace('status:', '')}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_transient_fault_then_answer_replays_with_zero_calls(provider, sdk, tmp_path, case):
    protocol, stream, retries, fault = case
    sdk(retries, SDK_TIMEOUT if fault == "timeout" else None)
    store = str(tmp_path / "store")
    inject(provider, fault, protocol)

    first = new_run(provider, store, "o", protocol)
    assert asyncio.run(attempt(first, protocol, stream, "transport", retry_step=True)) == ANSWER
    assert first.counters.model_live == 2 and first.counters.model_replayed == 0
    assert [(r.outcome, r.occurrence) for r in records(store, "o")] == [("ok", 1), ("ok", 1)]
    calls = wait_for_ledger(provider, fault)

    second = new_run(provider, store, "o", protocol)
    assert asyncio.run(attempt(second, protocol, stream, "transport", retry_step=False)) == ANSWER
    assert len(provider.ledger) == calls, "the retry paid the provider again for a turn already answered"
    assert (second.counters.model_live, second.counters.model_replayed) == (0, 2)


PROXY_CASES = [(p, s, True, f) for p in PROTOCOLS for s in (False, True) for f in ("timeout", "status:429")]


@pytest.mark.parametrize("case", PROXY_CASES, ids=[_id(c) for c in PROXY_CASES])
def test_transient_fault_through_the_proxy(provider, sdk, tmp_path, case):
    """Through the loopback proxy an SDK's timeout is a client hanging up: the answer it gave up
    on is not recorded, and its retry's answer is occurrence 1."""
    protocol, stream, retries, fault = case
    sdk(retries, SDK_TIMEOUT if fault == "timeout" else None)
    store = str(tmp_path / "store")
    inject(provider, fault, protocol)
    first = new_run(provider, store, "p", protocol)
    assert asyncio.run(attempt(first, protocol, stream, "proxy", retry_step=True)) == ANSWER
    calls = wait_for_ledger(provider, fault)
    second = new_run(provider, store, "p", protocol)
    assert asyncio.run(attempt(second, protocol, stream, "proxy", retry_step=False)) == ANSWER
    assert len(provider.ledger) == calls and (second.counters.model_live, second.counters.model_replayed) == (0, 2)
    assert len(records(store, "p")) == 2


TERMINAL = [(p, s, r, "status:429") for p in PROTOCOLS for s in (False, True) for r in (True, False)]


@pytest.mark.parametrize("case", TERMINAL, ids=[_id(c) for c in TERMINAL])
def test_terminal_400_after_a_transient_fault_is_replayed_as_the_same_error(provider, sdk, tmp_path, case):
    protocol, stream, retries, fault = case
    sdk(retries)
    store = str(tmp_path / "store")
    provider.inject(Fault(fault, match_protocol=protocol), Fault("status:400", match_protocol=protocol))
    first = new_run(provider, store, "t", protocol)
    with pytest.raises(Exception) as failed:
        asyncio.run(attempt(first, protocol, stream, "transport", retry_step=True))
    assert status_of(failed.value) == 400, repr(failed.value)
    [record] = records(store, "t")
    assert (record.outcome, record.occurrence, record.response["status"]) == ("error", 1, 400)
    calls = len(provider.ledger)

    second = new_run(provider, store, "t", protocol)
    with pytest.raises(Exception) as again:
        asyncio.run(attempt(second, protocol, stream, "transport", retry_step=False))
    assert status_of(again.value) == 400 and str(again.value) == str(failed.value)
    assert len(provider.ledger) == calls, "a recorded terminal error was sent upstream again"
    assert second.counters.model_replayed == 1 and second.counters.model_live == 0


DRIVER = """
import asyncio, json, sys
from tests.core import sdk_exchange
print(json.dumps(asyncio.run(sdk_exchange.main(*json.loads(sys.argv[1])))))
"""


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_new_process_after_sdk_retries_makes_no_call(provider, sdk, tmp_path, protocol):
    """The process boundary: SDK retries absorb a 429 and a 503 in one process; a new process
    replays both turns without a call."""
    sdk(True)
    store = str(tmp_path / "store")
    provider.inject(Fault("status:429", match_protocol=protocol), Fault("status:503", match_protocol=protocol))
    first = new_run(provider, store, "x", protocol)
    assert asyncio.run(attempt(first, protocol, True, "transport", retry_step=False)) == ANSWER
    calls = len(provider.ledger)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps([protocol, True, "transport", store, "x", provider.url])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["attempt"], out["model_live"], out["model_replayed"], out["answer"]) == (2, 0, 2, ANSWER)
    assert len(provider.ledger) == calls, "the new process paid the provider again"


def wait_for_ledger(provider: FakeProvider, fault: str) -> int:
    """The ledger's length once every call of attempt 1 is in it: a slow answer the SDK gave up
    on lands in the ledger when the fake provider finishes it, after the attempt moved on."""
    if fault == "timeout":
        deadline = time.monotonic() + 10
        while not any(e.fault and e.fault.startswith("slow_first_byte") for e in provider.ledger):
            assert time.monotonic() < deadline, "the slow call never reached the ledger"
            time.sleep(0.02)
    return len(provider.ledger)


@pytest.mark.parametrize("via", ["transport", "proxy"])
def test_identical_requests_in_flight_together_number_their_recorded_answers(provider, sdk, tmp_path, via):
    """Three identical requests at once, one hit by a 429 and retried by the SDK while the others
    are still in flight: the three answers are occurrences 1, 2, 3, and a next attempt sending the
    same three at once replays all of them without a call."""
    sdk(True)
    store = str(tmp_path / "store")
    provider.inject(Fault("status:429", match_protocol="openai-chat"))

    async def three(run: Run) -> list[str]:
        http, base = connect(run, "openai-chat", via)
        from openai import AsyncOpenAI

        client = AsyncOpenAI(base_url=base + "/v1", api_key="k", http_client=http, max_retries=2)
        q = [{"role": "user", "content": "What is the weather in Paris?"}]
        try:
            with run.activate():
                answers = await asyncio.gather(*(client.chat.completions.create(model="gpt-4o-mini", messages=q) for _ in range(3)))
            return [a.choices[0].message.tool_calls[0].function.name for a in answers]
        finally:
            await run.aclose()

    first = new_run(provider, store, "c", "openai-chat")
    assert asyncio.run(three(first)) == ["get_weather"] * 3
    assert sorted(r.occurrence for r in records(store, "c")) == [1, 2, 3]
    assert provider.live_calls() == 3 and len(provider.ledger) == 4
    second = new_run(provider, store, "c", "openai-chat")
    assert asyncio.run(three(second)) == ["get_weather"] * 3
    assert len(provider.ledger) == 4 and (second.counters.model_live, second.counters.model_replayed) == (0, 3)
