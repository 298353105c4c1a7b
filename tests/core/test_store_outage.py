"""A store outage is waited out, not paid for (issue 27 item 4(d); README.md, "Durability").

A whole run through ``run_agent`` (the raw ``openai`` SDK in a tool loop, tests/core/chat_adapter.py)
against a real S3 server (moto) reached through a TCP gate that is shut for a while mid-run: the
steps, the tool call's start, the memory commit and the result wait for the store and go on in
the same attempt. Past ``$TETHER_STORE_OUTAGE_SECONDS`` the attempt ends store-unreachable
(exit code 4), which executors do not count against ``retries``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest

from tests.core.chat_adapter import ADAPTER
from tests.support.s3 import Gate, new_bucket
from tether.agent import run_agent, tool
from tether.contract import EXIT_STORE_UNREACHABLE, progress_key
from tether.entrypoint import classify_exception
from tether.errors import ConfigError, StoreUnavailable
from tether.journal import read_records
from tether.memory import Memory
from tether.run import StepEvent
from tether.stores.outage import OUTAGE_ENV, outage_seconds, patiently
from tether.stores.s3 import S3Store
from tether.testing import FakeProvider

SCRIPT = {
    "conversations": [
        {"match": "refund", "turns": [{"tool_calls": [{"name": "refund", "arguments": {"order": "A1"}}]}, {"text": "Refunded order A1."}]}
    ]
}


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(SCRIPT) as provider:
        yield provider


class Stores:
    """The run's store through the gate, and the same bucket read directly (past the gate)."""

    def __init__(self, endpoint: str) -> None:
        bucket = new_bucket(endpoint)
        self.gate = Gate(int(endpoint.rsplit(":", 1)[1]))
        self.direct = S3Store(bucket, "tether", endpoint_url=endpoint)
        self.gated = WatchedStore(
            self.gate, bucket, "tether", endpoint_url=f"http://127.0.0.1:{self.gate.port}", max_attempts=2, connect_timeout=1
        )

    def away_after_first_step(self, seconds: float) -> Callable[[StepEvent], None]:
        """An ``on_step`` that shuts the gate once the first step is recorded, for ``seconds``."""

        def on_step(e: StepEvent) -> None:
            if e.index == 1:
                self.gate.shut()
                threading.Timer(seconds, self.gate.open).start()

        return on_step


class WatchedStore(S3Store):
    """The S3 store, noting each progress write it is asked for (its phase, whether the gate was
    open). ``outage_at_final``: the gate shuts as the final (Succeeded) write is first sent, and
    opens again once that write has been tried again during the outage."""

    def __init__(self, gate: Gate, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.gate = gate
        self.progress_puts: list[tuple[str, bool]] = []
        self.outage_at_final = False

    def put(self, key: str, data: bytes) -> None:
        if key.endswith("progress.json"):
            phase = json.loads(data)["phase"]
            finals = sum(1 for p, _ in self.progress_puts if p == "Succeeded")
            if phase == "Succeeded" and self.outage_at_final:
                if finals == 0:
                    self.gate.shut()
                elif not self.gate.is_open:
                    threading.Timer(1.0, self.gate.open).start()  # tried again during the outage: it may end
            self.progress_puts.append((phase, self.gate.is_open))
        super().put(key, data)


@pytest.fixture
def stores(s3_endpoint: str) -> Iterator[Stores]:
    s = Stores(s3_endpoint)
    yield s
    s.gate.shut()


def refund_tool(runs: list[str]):
    @tool
    async def refund(order: str) -> str:
        """Refund an order."""
        runs.append(order)
        return f"refunded {order}"

    return refund


async def test_an_outage_mid_run_is_waited_out_in_the_same_attempt(fake: FakeProvider, stores: Stores, capfd) -> None:
    """The store goes away once the first turn (asking for the refund) is recorded, for 3 s: the
    tool call's start, its record, the next turn's record and the memory commit wait for it; the
    run succeeds in its first attempt, each turn paid once, the tool run once, memory whole."""
    runs: list[str] = []

    result = await run_agent(
        ADAPTER,
        "refund order A1",
        model="gpt-4o-mini",
        tools=[refund_tool(runs)],
        run_id="mid",
        store=stores.gated,
        memory_key="m",
        namespace="ns",
        upstreams={"openai": fake.url + "/openai"},
        on_step=stores.away_after_first_step(3.0),
    )
    assert result.status == "succeeded" and result.output == "Refunded order A1."
    assert result.attempt == 1 and (result.model_live, result.tool_live) == (2, 1)
    assert fake.live_calls() == 2 and runs == ["A1"]
    records = read_records(stores.direct, "mid")
    assert sorted((r.kind, r.attempt) for r in records) == [("model", 1), ("model", 1), ("tool", 1)]
    assert [m["role"] for m in Memory(stores.direct, "ns", "m").load()] == ["user", "assistant", "tool", "assistant"]
    progress = json.loads(stores.direct.get(progress_key("mid")) or b"{}")
    assert progress["phase"] == "Succeeded" and progress["result"] == "Refunded order A1."
    assert "the store does not answer" in capfd.readouterr().err  # the attempt said why it waited


async def test_an_outage_at_the_final_write_leaves_the_run_with_its_result(fake: FakeProvider, stores: Stores) -> None:
    """The store goes away exactly as the final progress write (the only home of the run's result)
    is sent, and comes back once that write was tried again: it waits, and the run ends Succeeded
    with its result in the store. (On main it failed quietly: a succeeded attempt whose result
    was nowhere.)"""
    runs: list[str] = []
    stores.gated.outage_at_final = True
    result = await run_agent(
        ADAPTER,
        "refund order A1",
        model="gpt-4o-mini",
        tools=[refund_tool(runs)],
        run_id="final",
        store=stores.gated,
        upstreams={"openai": fake.url + "/openai"},
    )
    assert result.status == "succeeded" and result.attempt == 1
    finals = [was_open for phase, was_open in stores.gated.progress_puts if phase == "Succeeded"]
    # Sent during the outage, then again until it landed (the gate may open while the last try is
    # on its way, so whether it was open when that try was asked for is not checked).
    assert finals[:2] == [False, False] and len(finals) >= 3, stores.gated.progress_puts
    progress = json.loads(stores.direct.get(progress_key("final")) or b"{}")
    assert progress["phase"] == "Succeeded" and progress["result"] == "Refunded order A1."


async def test_past_the_bound_the_attempt_ends_store_unreachable(fake: FakeProvider, stores: Stores, monkeypatch) -> None:
    """A store that stays away longer than TETHER_STORE_OUTAGE_SECONDS ends the attempt with exit
    code 4 (not a recoverable failure counted against retries); the next attempt replays what was
    durable and runs nothing twice."""
    monkeypatch.setenv(OUTAGE_ENV, "2")
    runs: list[str] = []

    def on_step(e: StepEvent) -> None:
        if e.index == 1:
            stores.gate.shut()

    common = dict(model="gpt-4o-mini", tools=[refund_tool(runs)], run_id="gone", upstreams={"openai": fake.url + "/openai"})
    with pytest.raises(Exception) as ended:
        await run_agent(ADAPTER, "refund order A1", store=stores.gated, on_step=on_step, **common)  # type: ignore[arg-type]
    assert classify_exception(ended.value) == EXIT_STORE_UNREACHABLE, repr(ended.value)
    assert runs == [] and fake.live_calls() == 1  # the tool call did not start without the store
    stores.gate.open()
    result = await run_agent(ADAPTER, "refund order A1", store=stores.gated, **common)  # type: ignore[arg-type]
    assert result.status == "succeeded" and (result.model_replayed, result.model_live, result.tool_live) == (1, 1, 1)
    assert runs == ["A1"] and fake.live_calls() == 2


async def test_an_approval_request_waits_for_the_store(fake: FakeProvider, stores: Stores) -> None:
    """The store goes away once the turn asking for an approval-required refund is recorded: the
    approval request waits for it and is written once, and the attempt suspends for a human (on
    main the request's write failed the attempt)."""
    from tether.approvals import list_approvals

    @tool(approval="Refund {order}?")
    async def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    result = await run_agent(
        ADAPTER,
        "refund order A1",
        model="gpt-4o-mini",
        tools=[refund],
        run_id="asks",
        store=stores.gated,
        upstreams={"openai": fake.url + "/openai"},
        on_step=stores.away_after_first_step(3.0),
    )
    assert result.status == "suspended" and result.attempt == 1
    requests = list_approvals(stores.direct, "asks")
    assert [r["id"] for r in requests] == [result.pending_approval] and requests[0]["prompt"] == "Refund A1?"


def test_the_bound_is_a_setting_and_only_an_unavailable_store_waits(monkeypatch) -> None:
    monkeypatch.delenv(OUTAGE_ENV, raising=False)
    assert outage_seconds() == 300.0
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(OUTAGE_ENV, bad)
        with pytest.raises(ConfigError, match=OUTAGE_ENV):
            outage_seconds()
    monkeypatch.setenv(OUTAGE_ENV, "5")
    tries: list[int] = []

    def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise StoreUnavailable("S3 put x: ConnectionRefused")
        return "written"

    assert patiently(flaky, "a write") == "written" and len(tries) == 3

    def denied() -> None:
        tries.append(1)
        raise ConfigError("not the store's outage")

    tries.clear()
    with pytest.raises(ConfigError):
        patiently(denied, "a write")
    assert len(tries) == 1  # anything but StoreUnavailable is raised at once
