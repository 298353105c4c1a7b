"""Replay across processes, through every real SDK: attempt 1 records, a second process replays.

For every protocol of ``sdk_exchange.EXCHANGES`` × streamed or not × proxy or in-process transport
(all on the local store, and ``openai-chat`` on S3 too), one process runs the two-turn exchange
live and a *second process* runs it again. The second one must make no upstream call at all (the
fake provider's ledger does not grow), count two replayed model turns and hand the SDK exactly the
same bytes (a digest taken by a tap between the SDK and whatever carries its traffic).

Startup dominates (importing an SDK costs 1-3 s), so one process runs the four (stream × way)
variants of a protocol one after the other, each with its own run scope and its own fake provider;
the recording process and the replaying process are still two separate processes, and the pairs
run in parallel. Each variant is its own test item, asserted from the results of the batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.core.sdk_exchange import EXCHANGES
from tests.support.s3 import new_bucket
from tether.journal import Record
from tether.stores import open_store
from tether.testing import FakeProvider

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "It is sunny in Paris."
SCRIPT = {
    "conversations": [
        {
            "match": "weather",
            "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, {"text": ANSWER}],
        }
    ]
}


async def mistral_conversations(http, base, stream):
    """``sdk_exchange``'s Mistral conversations exchange, streamed too (``start_stream`` /
    ``append_stream``); the shared program only runs the non-streamed calls."""
    from mistralai.client import Mistral

    from tests.core.sdk_exchange import KEY, PARAMS, QUESTION

    if not stream:
        return await EXCHANGES["mistral-conversations"](http, base, stream)
    client = Mistral(api_key=KEY, server_url=base, async_client=http)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]
    conversation, call, text = None, None, ""
    async for event in await client.beta.conversations.start_stream_async(model="mistral-small-latest", inputs=QUESTION, tools=tools):
        conversation = getattr(event.data, "conversation_id", None) or conversation
        if event.data.type == "function.call.delta":
            call = event.data.tool_call_id
    result = {"type": "function.result", "tool_call_id": call, "result": "sunny"}
    async for event in await client.beta.conversations.append_stream_async(conversation_id=conversation, inputs=[result]):
        if event.data.type == "message.output.delta" and isinstance(event.data.content, str):
            text += event.data.content
    return text


# Runs several exchanges in one process: argv[1] is a JSON list of [protocol, stream, via, store,
# scope, origin]; prints one JSON line per exchange (the result, or the error it raised).
DRIVER = r"""
import asyncio, json, sys, traceback
from tests.core import sdk_exchange
from tests.core.test_replay import mistral_conversations
exchanges = {**sdk_exchange.EXCHANGES, "mistral-conversations": mistral_conversations}
sdk_exchange.EXCHANGES = exchanges  # main() looks the exchange up by name at call time
for protocol, stream, via, store, scope, origin in json.loads(sys.argv[1]):
    try:
        out = asyncio.run(sdk_exchange.main(protocol, stream, via, store, scope, origin))
    except Exception:
        out = {"error": traceback.format_exc()}
    print(json.dumps({"scope": scope, **out}), flush=True)
"""

VARIANTS = [(p, s, v, "local") for p in EXCHANGES for s in (False, True) for v in ("proxy", "transport")]
VARIANTS += [("openai-chat", s, v, "s3") for s in (False, True) for v in ("proxy", "transport")]


def _id(variant) -> str:
    protocol, stream, via, store = variant
    return f"{protocol}-{'stream' if stream else 'plain'}-{via}-{store}"


def _run_batch(configs: list[list]) -> dict[str, dict]:
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(configs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            out = json.loads(line)
            results[out["scope"]] = out
    for config in configs:  # a crashed process leaves its variants without a result
        results.setdefault(config[4], {"error": f"exit {proc.returncode}: {proc.stderr[-3000:]}"})
    return results


@pytest.fixture(scope="module")
def replays(tmp_path_factory, s3_endpoint):
    """Run every variant twice (two processes per batch) and collect what each attempt saw."""
    local_store = str(tmp_path_factory.mktemp("replay") / "store")
    stores = {"local": local_store}
    if any(v[3] == "s3" for v in VARIANTS):
        stores["s3"] = f"s3://{new_bucket(s3_endpoint)}/tether?endpoint_url={s3_endpoint}"
    providers = {_id(v): FakeProvider(SCRIPT).start() for v in VARIANTS}
    try:
        batches: dict[tuple, list[list]] = {}
        for v in VARIANTS:
            protocol, stream, via, store = v
            batches.setdefault((protocol, store), []).append([protocol, stream, via, stores[store], _id(v), providers[_id(v)].url])
        ledgers: dict[str, list] = {}

        def pair(configs: list[list]) -> tuple[dict, dict]:
            first = _run_batch(configs)
            for c in configs:  # the ledger as the recording process left it
                ledgers[c[4]] = providers[c[4]].ledger.snapshot()
            second = _run_batch(configs)
            return first, second

        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(pair, batches.values()))
        out = {}
        for first, second in done:
            for scope in first:
                out[scope] = {
                    "first": first[scope],
                    "second": second[scope],
                    "ledger_after_first": ledgers[scope],
                    "ledger_after_second": providers[scope].ledger.snapshot(),
                }
        yield out, stores
    finally:
        for p in providers.values():
            p.stop()


@pytest.mark.parametrize("variant", VARIANTS, ids=[_id(v) for v in VARIANTS])
def test_second_process_replays_byte_identical(replays, variant):
    results, stores = replays
    protocol, stream, via, store = variant
    r = results[_id(variant)]
    first, second = r["first"], r["second"]
    assert "error" not in first, first["error"]
    assert "error" not in second, second["error"]

    # Attempt 1: two live calls, recorded.
    assert (first["attempt"], first["model_live"], first["model_replayed"]) == (1, 2, 0)
    assert first["answer"] == ANSWER
    live = [e for e in r["ledger_after_first"] if e.live]
    assert len(live) == 2 == len(r["ledger_after_first"])
    assert all(e.streamed == stream for e in live), [e.streamed for e in live]
    assert all(e.protocol == protocol for e in live), [e.protocol for e in live]

    # Attempt 2, another process: no upstream call at all, everything replayed.
    assert r["ledger_after_second"] == r["ledger_after_first"], "the replaying process reached the provider"
    assert (second["attempt"], second["model_live"], second["model_replayed"]) == (2, 0, 2)
    assert second["digest"] == first["digest"], "the SDK was handed different bytes on replay"
    assert second["answer"] == first["answer"]
    # Usage moves from live to replayed (a replayed turn costs nothing).
    assert second["usage_live"] == 0 and second["usage_replayed"] == first["usage_live"] > 0

    # What the store holds for this run: two model records, both intact, and two attempt markers.
    st = open_store(stores[store])
    keys = st.list(f"journal/{_id(variant)}/")
    recs = [k for k in keys if k.endswith(".rec")]
    assert len(recs) == 2 and len([k for k in keys if "/attempts/" in k]) == 2, keys
    for k in recs:
        record = Record.decode(st.get(k))
        assert record is not None and record.kind == "model" and record.outcome == "ok" and record.attempt == 1
        assert record.response["streamed"] == stream
        assert record.response["protocol"] == protocol
