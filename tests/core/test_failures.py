"""Failures at the wire seam (README.md, "How it works": Wire seam), with the real ``openai`` SDK.

Each attempt is a fresh :class:`~tether.run.Run` of the same scope (it loads the journal again,
claims the next attempt number); the SDK reaches it through the in-process transport or the
loopback proxy; the fake provider injects faults and keeps the ledger of calls it answered.
"""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from tests.support.s3 import Gate, new_bucket
from tether.journal import Record
from tether.run import Run
from tether.stores import open_store
from tether.stores.s3 import S3Store
from tether.testing import FakeProvider, Fault
from tether.wire.loop import run_on_wire_loop
from tether.wire.proxy import shared_proxy
from tether.wire.transport import WireTransport

KEY = "sk-test-failures"
QUESTION = "What is the weather in Paris?"
ANSWER = "It is sunny in Paris."
SCRIPT = {
    "conversations": [
        {"match": "weather", "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, {"text": ANSWER}]}
    ]
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
]


@pytest.fixture
def provider():
    with FakeProvider(SCRIPT) as p:
        yield p


@pytest.fixture
def attempt(provider, tmp_path):
    """``attempt(scope, via, store=None)``: a new Run of ``scope`` and an SDK client into it."""
    runs: list[Run] = []

    def new(scope: str, via: str, store=None) -> tuple[Run, openai.OpenAI]:
        run = Run(scope, store or str(tmp_path / "store"), upstreams={"openai": provider.url + "/openai"})
        runs.append(run)
        if via == "proxy":
            client = openai.OpenAI(base_url=shared_proxy().base_url(run, "openai") + "/v1", api_key=KEY, max_retries=0)
        else:
            http = httpx.Client(transport=WireTransport("openai", run))
            client = openai.OpenAI(base_url=run.upstreams["openai"] + "/v1", api_key=KEY, max_retries=0, http_client=http)
        return run, client

    yield new
    for run in runs:
        shared_proxy().unregister(run)
        run_on_wire_loop(run.aclose())


def ask(client: openai.OpenAI, messages: list[dict], stream: bool):
    if stream:
        with client.chat.completions.stream(model="gpt-4o-mini", messages=messages, tools=TOOLS) as s:
            return s.get_final_completion()
    return client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)


def turn2_messages(first, tool_result: str) -> list[dict]:
    call = first.choices[0].message.tool_calls[0]
    return [
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": call.function.arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": tool_result},
    ]


def model_records(store, scope: str) -> list[Record]:
    store = open_store(store)
    blobs = store.get_many(store.list(f"journal/{scope}/model/"))
    return [Record.decode(b) for b in blobs.values()]


VIAS = ["transport", "proxy"]
Q = [{"role": "user", "content": QUESTION}]


# -- recoverable: never recorded, run again ----------------------------------------------------
RECOVERABLE = [("status:429", False), ("status:429", True), ("status:500", False), ("status:500", True), ("reset", True), ("reset", False)]


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("fault,stream", RECOVERABLE, ids=[f"{f}-{'stream' if s else 'plain'}" for f, s in RECOVERABLE])
def test_recoverable_fault_is_not_recorded_and_runs_again(attempt, provider, tmp_path, fault, stream, via):
    store = str(tmp_path / "store")
    provider.inject(Fault(fault))
    run, client = attempt("r", via)
    with pytest.raises((openai.APIError, httpx.TransportError)) as failed:
        ask(client, Q, stream)
    if fault.startswith("status:"):  # the SDK sees the provider's own status
        assert isinstance(failed.value, openai.APIStatusError) and failed.value.status_code == int(fault[7:])
    else:
        assert isinstance(failed.value, (openai.APIConnectionError, httpx.TransportError, openai.InternalServerError))
    assert len(provider.ledger) == 1 and provider.live_calls() == 0  # the fault happened upstream
    assert model_records(store, "r") == [], "a recoverable failure was recorded"
    assert run.journal.records == {} and run.counters.model_replayed == 0

    run, client = attempt("r", via)
    assert ask(client, Q, stream).choices[0].message.tool_calls[0].function.name == "get_weather"
    assert provider.live_calls() == 1 and run.counters.model_live == 1
    [record] = model_records(store, "r")
    assert record is not None and record.outcome == "ok" and record.attempt == 2

    run, client = attempt("r", via)
    ask(client, Q, stream)
    assert len(provider.ledger) == 2 and run.counters.model_replayed == 1


@pytest.mark.parametrize("status", [408, 409, 502, 503])
def test_other_recoverable_statuses_are_not_recorded(attempt, provider, tmp_path, status):
    provider.inject(Fault(f"status:{status}"))
    run, client = attempt("r", "transport")
    with pytest.raises(openai.APIStatusError) as failed:
        ask(client, Q, False)
    assert failed.value.status_code == status
    assert model_records(str(tmp_path / "store"), "r") == []
    run, client = attempt("r", "transport")
    ask(client, Q, False)
    assert provider.live_calls() == 1 and len(model_records(str(tmp_path / "store"), "r")) == 1


# -- terminal: recorded, replayed as the same error ----------------------------------------------
@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_400_is_recorded_and_replayed_as_the_same_error(attempt, provider, tmp_path, stream, via):
    provider.inject(Fault("status:400"))
    seen = []
    for n in (1, 2, 3):
        run, client = attempt("t", via)
        with pytest.raises(openai.BadRequestError) as failed:
            ask(client, Q, stream)
        seen.append((failed.value.status_code, failed.value.response.content))
        assert run.attempt == n
        assert (run.counters.model_live, run.counters.model_replayed) == ((1, 0) if n == 1 else (0, 1))
    assert seen[0][0] == 400 and b"injected bad request" in seen[0][1]
    assert seen[1] == seen[0] == seen[2], "the replayed error differs from the recorded one"
    assert len(provider.ledger) == 1, "a terminal error was sent upstream again"
    [record] = model_records(str(tmp_path / "store"), "t")
    assert record.outcome == "error" and record.response["status"] == 400 and record.attempt == 1


@pytest.mark.parametrize("status", [401, 403, 404, 405])
def test_refusals_of_the_key_or_endpoint_are_not_recorded(attempt, provider, tmp_path, status):
    """A refused key (401/403) or a wrong endpoint (404/405: a mistyped base URL) says nothing about
    the request, which the fingerprint keeps apart from both: the retry (key or URL fixed) calls
    the model instead of replaying the refusal."""
    provider.inject(Fault(f"status:{status}"))
    run, client = attempt("t", "transport")
    with pytest.raises(openai.APIStatusError) as failed:
        ask(client, Q, False)
    assert failed.value.status_code == status
    assert model_records(str(tmp_path / "store"), "t") == []
    run, client = attempt("t", "transport")
    ask(client, Q, False)
    assert len(provider.ledger) == 2 and run.counters.model_live == 1


@pytest.mark.parametrize("status", [400, 422])
def test_other_4xx_are_terminal(attempt, provider, tmp_path, status):
    provider.inject(Fault(f"status:{status}"))
    for _ in range(2):
        run, client = attempt("t", "transport")
        with pytest.raises(openai.APIStatusError) as failed:
            ask(client, Q, False)
        assert failed.value.status_code == status
    assert len(provider.ledger) == 1 and run.counters.model_replayed == 1


# -- divergence: a cache miss, not an error ------------------------------------------------------
@pytest.mark.parametrize("via", VIAS)
def test_changed_message_is_one_live_call_and_a_divergence(attempt, provider, via):
    run, client = attempt("d", via)
    first = ask(client, Q, False)
    assert ask(client, turn2_messages(first, "sunny"), False).choices[0].message.content == ANSWER
    assert provider.live_calls() == 2 and run.counters.first_divergence is None

    # The retry sends the same first turn and a different tool result in the second.
    run, client = attempt("d", via)
    first = ask(client, Q, False)
    answer = ask(client, turn2_messages(first, "rainy"), False).choices[0].message.content
    assert answer == ANSWER  # the run completes
    assert provider.live_calls() == 3, "exactly one live call: the changed turn"
    assert (run.counters.model_replayed, run.counters.model_live) == (1, 1)
    divergence = run.counters.first_divergence
    assert divergence is not None and (divergence["kind"], divergence["step"], divergence["attempt"]) == ("model", 2, 2)

    # The new turn was recorded: a third attempt on the changed path replays everything.
    run, client = attempt("d", via)
    ask(client, turn2_messages(ask(client, Q, False), "rainy"), False)
    assert provider.live_calls() == 3 and run.counters.model_replayed == 2 and run.counters.first_divergence is None


def test_clean_replay_has_no_divergence_and_a_new_turn_after_the_journal_is_not_one(attempt, provider):
    """A miss after every recorded step was used is the run going further, not a divergence."""
    run, client = attempt("g", "transport")
    ask(client, Q, False)
    run, client = attempt("g", "transport")
    first = ask(client, Q, False)
    ask(client, turn2_messages(first, "sunny"), False)
    assert (run.counters.model_replayed, run.counters.model_live) == (1, 1)
    assert run.counters.first_divergence is None


# -- corrupt records -----------------------------------------------------------------------------
DAMAGE = {
    "flipped-body-byte": lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 0x01]) + b[len(b) // 2 + 1 :],
    "flipped-header-byte": lambda b: b[:5] + bytes([b[5] ^ 0x20]) + b[6:],
    "truncated-half": lambda b: b[: len(b) // 2],
    "truncated-checksum": lambda b: b[:-10],
    "empty": lambda b: b"",
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_corrupt_record_is_a_miss_and_is_overwritten(attempt, provider, store_url, damage):
    run, client = attempt("c", "transport", store_url)
    good = ask(client, Q, False)
    store = open_store(store_url)
    [name] = store.list("journal/c/model/")
    store.put(name, DAMAGE[damage](store.get(name)))
    assert Record.decode(store.get(name)) is None
    # The copy in the tail is damaged alike (a whole copy would be replayed: the step was written).
    store.put("journal/c/tail", DAMAGE[damage](store.get("journal/c/tail")))

    run, client = attempt("c", "transport", store_url)
    again = ask(client, Q, False)
    assert run.counters.corrupt == 1 and (run.counters.model_live, run.counters.model_replayed) == (1, 0)
    assert provider.live_calls() == 2, "a corrupt record must be a miss: one live call"
    assert again.choices[0].message.tool_calls[0].function.name == good.choices[0].message.tool_calls[0].function.name
    record = Record.decode(store.get(name))
    assert record is not None and record.attempt == 2, "the corrupt record was not replaced by a good one"

    run, client = attempt("c", "transport", store_url)
    ask(client, Q, False)
    assert run.counters.corrupt == 0 and run.counters.model_replayed == 1 and provider.live_calls() == 2


# -- an S3 outage during a live step -------------------------------------------------------------
@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_s3_outage_during_a_live_step_is_waited_out(attempt, provider, s3_endpoint, stream, via):
    """Issue 27 (d): a step whose journal write finds the store down waits for it (backoff, up
    to TETHER_STORE_OUTAGE_SECONDS) and counts once written: the same attempt goes on, nothing
    runs twice. (On main the step failed and the attempt ended.)"""
    bucket = new_bucket(s3_endpoint)
    gate = Gate(int(s3_endpoint.rsplit(":", 1)[1]))
    direct = S3Store(bucket, "tether", endpoint_url=s3_endpoint)
    try:
        run, client = attempt(
            "w", via, S3Store(bucket, "tether", endpoint_url=f"http://127.0.0.1:{gate.port}", max_attempts=2, connect_timeout=1)
        )
        first = ask(client, Q, stream)
        gate.shut()
        threading.Timer(3.0, gate.open).start()  # S3 comes back while the second step waits
        assert ask(client, turn2_messages(first, "sunny"), stream).choices[0].message.content == ANSWER
        assert (run.counters.model_live, run.counters.model_replayed) == (2, 0) and provider.live_calls() == 2
        records = model_records(direct, "w")
        assert len(records) == 2 and [r.attempt for r in records] == [1, 1]
        run, client = attempt("w", via, direct)  # the next attempt replays both
        ask(client, turn2_messages(ask(client, Q, stream), "sunny"), stream)
        assert run.counters.model_replayed == 2 and provider.live_calls() == 2
    finally:
        gate.shut()


@pytest.mark.parametrize("single_copy", [False, True], ids=["loose", "single-copy"])
def test_a_journal_write_whose_answer_was_lost_counts_once_and_keeps_the_fence(attempt, provider, s3_endpoint, single_copy):
    """While S3 takes the writes but its answers are lost (each write lands, the client sees a
    cut connection), the step waits; once answers come back, the conditional tail write finds
    its own blob (not a rival's: no Superseded), the step counts once, and the fence holds: a
    newer attempt still supersedes this one."""
    from tether.errors import Superseded

    bucket = new_bucket(s3_endpoint)
    gate = Gate(int(s3_endpoint.rsplit(":", 1)[1]))
    direct = S3Store(bucket, "tether", endpoint_url=s3_endpoint)
    try:
        run, client = attempt(
            "l", "transport", S3Store(bucket, "tether", endpoint_url=f"http://127.0.0.1:{gate.port}", max_attempts=2, connect_timeout=1)
        )
        run.journal.single_copy = single_copy
        first = ask(client, Q, False)
        tail = direct.get(run.journal.tail_key)
        landed: list[bytes | None] = []

        def answer_again() -> None:
            landed.append(direct.get(run.journal.tail_key))  # what the store took while answers were lost
            gate.silence(False)

        gate.silence(True)
        threading.Timer(3.0, answer_again).start()
        assert ask(client, turn2_messages(first, "sunny"), False).choices[0].message.content == ANSWER
        assert landed and landed[0] != tail, "no write landed while its answer was lost"
        assert run.superseded_by is None and run.stopping is None
        assert (run.counters.model_live, provider.live_calls()) == (2, 2)
        newer, _ = attempt("l", "transport", direct)
        assert newer.journal.attempt == 2 and len(newer.journal.records) == 2  # each step once
        record = Record("tool", "fp", 1, "ok", {}, body=b'"x"')
        with pytest.raises(Superseded):
            run.record(record)
    finally:
        gate.shut()


@pytest.mark.parametrize("via", VIAS)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_s3_outage_past_the_bound_is_recoverable_and_drops_nothing(attempt, provider, s3_endpoint, stream, via, monkeypatch):
    monkeypatch.setenv("TETHER_STORE_OUTAGE_SECONDS", "0")  # no wait: the attempt ends as soon as a write fails
    bucket = new_bucket(s3_endpoint)
    gate = Gate(int(s3_endpoint.rsplit(":", 1)[1]))
    direct = S3Store(bucket, "tether", endpoint_url=s3_endpoint)  # reads past the gate
    try:

        def gated() -> S3Store:
            return S3Store(bucket, "tether", endpoint_url=f"http://127.0.0.1:{gate.port}", max_attempts=2, connect_timeout=1)

        run, client = attempt("o", via, gated())
        first = ask(client, Q, stream)
        assert len(model_records(direct, "o")) == 1

        gate.shut()  # S3 goes away after the journal loaded and the first step was recorded
        with pytest.raises((openai.APIError, httpx.TransportError)) as failed:
            ask(client, turn2_messages(first, "sunny"), stream)
        if via == "proxy" and not stream:
            assert isinstance(failed.value, openai.InternalServerError) and failed.value.status_code == 502
        elif not stream:
            assert isinstance(failed.value, openai.APIConnectionError)
        assert provider.live_calls() == 2  # the model answered; its answer could not be made durable
        assert len(run.journal.records) == 1, "the journal claims a step it could not write"
        assert len(model_records(direct, "o")) == 1

        gate.open()
        run, client = attempt("o", via, gated())
        first = ask(client, Q, stream)
        assert ask(client, turn2_messages(first, "sunny"), stream).choices[0].message.content == ANSWER
        assert (run.counters.model_replayed, run.counters.model_live) == (1, 1)
        assert provider.live_calls() == 3
        records = model_records(direct, "o")
        assert len(records) == 2 and all(r is not None for r in records)
        assert sorted(r.attempt for r in records) == [1, 2]

        run, client = attempt("o", via, gated())
        ask(client, turn2_messages(ask(client, Q, stream), "sunny"), stream)
        assert run.counters.model_replayed == 2 and provider.live_calls() == 3
    finally:
        gate.shut()


def test_journal_packs_records_for_one_read_loads_and_survives_a_corrupt_pack(tmp_path):
    """An attempt keeps a pack of its records (in the background every PACK_EVERY records, and
    at its end) and a tail of those the pack lacks; after a clean end the next load reads the two
    copies, without a listing; a pack that is not whole falls back to the listing, and a step
    whose packed record is corrupt (its only copy once packed) is a miss."""
    from tether.journal import PACK_EVERY, Journal, Record
    from tether.stores import LocalStore

    class CountingStore(LocalStore):
        gets = lists = 0

        def get(self, key):
            type(self).gets += 1
            return super().get(key)

        def list(self, prefix):
            type(self).lists += 1
            return super().list(prefix)

    store = CountingStore(tmp_path)
    first = Journal(store, "p").load()
    for i in range(PACK_EVERY + 2):
        first.append(Record("tool", f"fp{i}", 1, "ok", {"i": i}, body=b'"x"'))
    first.close()  # the end of the attempt: the pack holds every record
    CountingStore.gets = CountingStore.lists = 0
    second = Journal(store, "p").load()
    assert len(second.records) == PACK_EVERY + 2 and (CountingStore.gets, CountingStore.lists) == (2, 0)  # pack + tail
    assert second.attempt == 2
    rival = Journal(store, "p").load()  # started meanwhile: the tail second took over names it, so no listing
    assert rival.attempt == 3 and CountingStore.lists == 0 and len(rival.records) == PACK_EVERY + 2
    assert store.list("journal/p/tool/") == []  # packed: each step stored once
    data = bytearray(store.get(second.pack_key))
    data[20] ^= 0xFF  # break the pack's header: its records are read all the same (each has its checksum)
    store.put(second.pack_key, bytes(data))
    third = Journal(store, "p").load()
    assert len(third.records) == PACK_EVERY + 2 and third.counters.corrupt == 0 and third.attempt == 4
    third.close()
    data = bytearray(store.get(third.pack_key))
    data[data.index(b"\n") + 8 + 5] ^= 0xFF  # break the first packed record (its only copy)
    store.put(third.pack_key, bytes(data))
    third = Journal(store, "p").load()
    assert len(third.records) == PACK_EVERY + 1 and third.counters.corrupt == 1 and third.attempt == 5
    assert ("tool", "fp0", 1) not in third.records  # a miss: the step runs again and is recorded
    third.append(Record("tool", "fp0", 1, "ok", {"i": 0}, body=b'"x"'))
    third.close()
    data = bytearray(store.get(third.pack_key))
    data[-5] ^= 0xFF  # a closed pack that is not whole: its claim is kept, the journal listed
    store.put(third.pack_key, bytes(data))
    CountingStore.lists = 0
    fourth = Journal(store, "p").load()
    assert len(fourth.records) == PACK_EVERY + 1 and fourth.counters.corrupt == 1 and fourth.attempt == 6 and CountingStore.lists == 1
    assert len(store.list("journal/p/attempts/")) == 6


def test_a_newer_attempt_fences_the_older_one(tmp_path, capfd):
    """Two attempts never write one journal: a load takes the tail over, merging a step the older
    attempt wrote meanwhile (nothing it recorded is lost); from then on the older attempt's writes
    are refused (Superseded, said on stderr), its close writes nothing, and the next load sees each
    step once. (On main the older attempt's late step was recorded beside the newer one's.)"""
    from tether.errors import Superseded
    from tether.journal import Journal, Record
    from tether.stores import LocalStore

    store = LocalStore(tmp_path)
    older = Journal(store, "z").load()
    older.append(Record("tool", "before", 1, "ok", {}, body=b"0"))

    class Racing(LocalStore):
        """The older attempt records a step between the newer one's read of the tail and its takeover."""

        raced = False

        def write_if(self, key, data, version):
            if key.endswith("/tail") and not Racing.raced:
                Racing.raced = True
                older.append(Record("tool", "raced", 1, "ok", {}, body=b"1"))
            return super().write_if(key, data, version)

    newer = Journal(Racing(tmp_path), "z").load()
    assert Racing.raced and sorted(fp for _, fp, _ in newer.records) == ["before", "raced"]
    newer.append(Record("tool", "mine", 1, "ok", {}, body=b"2"))
    with pytest.raises(Superseded, match="attempt 2 of run z has started"):
        older.append(Record("tool", "late", 1, "ok", {}, body=b"3"))
    assert "tether: attempt 2 of run z has started: attempt 1's journal writes and tool calls are refused" in capfd.readouterr().err
    assert older.superseded() and newer.superseded() is None
    newer.close()
    packed = store.get(newer.pack_key)
    older.close()  # superseded: writes nothing
    assert store.get(newer.pack_key) == packed
    after = Journal(store, "z").load()
    assert after.attempt == 3
    assert sorted(fp for _, fp, _ in after.records) == ["before", "mine", "raced"]
    assert not [k for k in store.list("journal/z/") if "late" in k]


def test_a_crash_between_pack_writes_loses_and_duplicates_no_record(tmp_path):
    """Records written after the last pack (the process killed before the next one) are read
    loose; a record both packed and loose counts once."""
    from tether.journal import PACK_EVERY, Journal, Record
    from tether.stores import LocalStore

    store = LocalStore(tmp_path)
    first = Journal(store, "c").load()
    total = PACK_EVERY + 3
    for i in range(total):
        if i % 2:  # identical requests: occurrences in the order the answers were recorded
            first.append_next(Record("model", "same-request", 0, "ok", {"i": i}, body=str(i).encode()))
        else:
            first.append(Record("tool", f"t{i}", 1, "ok", {"i": i}, body=b"1"))
    packer = first._packer
    if packer is not None:  # the background pack of the first PACK_EVERY records
        packer.join(10)
    packed = store.get(first.pack_key)
    assert packed is not None
    # Killed here: no close(), the last records exist only loose.
    second = Journal(store, "c").load()
    assert len(second.records) == total and second.counters.corrupt == 0
    model = sorted(r.occurrence for r in second.records.values() if r.kind == "model")
    assert model == list(range(1, total // 2 + 1))  # every answer once, numbered as recorded
    replayed = [second.replay_next("model", "same-request") for _ in model]
    assert [r.body for r in replayed] == [str(i).encode() for i in range(1, total, 2)]
    assert second.replay_next("model", "same-request") is None  # nothing twice
    # The packed records' loose copies went once the pack was durable (a store's put is atomic:
    # a pack is replaced whole, never torn); the later ones stay loose until a pack holds them.
    assert len([k for k in store.list("journal/c/") if k.endswith(".rec")]) <= total - PACK_EVERY
    third = Journal(store, "c").load()
    assert len(third.records) == total and third.attempt == 3
    new = third.append_next(Record("model", "same-request", 0, "ok", {}, body=b"new"))
    assert new == ("model", "same-request", total // 2 + 1)  # the next free occurrence, no overwrite
    third.close()
    fourth = Journal(store, "c").load()
    assert len(fourth.records) == total + 1 and fourth.attempt == 4
