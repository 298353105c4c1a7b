"""Replay across processes, through every real SDK: attempt 1 records, a second process replays.

For every protocol of ``sdk_exchange.EXCHANGES`` × streamed or not × proxy or in-process transport
(all on the local store, and ``openai-chat`` on S3 too), one process runs the two-turn exchange
live and a *second process* runs it again. The second one must make no upstream call at all (the
fake provider's ledger does not grow), count two replayed model turns and hand the SDK exactly the
same bytes (a digest taken by a tap between the SDK and whatever carries its traffic).

Startup dominates (importing the SDKs costs seconds), so the processes are forked from a warm
zygote (``tests/support/zygote.py``) that imported every SDK once, and one process runs the four
(stream × way) variants of a protocol one after the other, each with its own run scope and its own
fake provider; the recording process and the replaying process are still two separate processes
(two forks, the second started after the first exited), and two zygotes run pairs in parallel.
Each variant is its own test item, asserted from the results of the batch.
"""

from __future__ import annotations

import asyncio
import json
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.core.sdk_exchange import EXCHANGES
from tests.support.s3 import new_bucket
from tests.support.zygote import Zygote
from tether.journal import read_records
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


def replay_batch(configs: list[list]) -> int:
    """One process's work (forked from the zygote): each ``[protocol, stream, via, store, scope,
    origin]`` in turn; prints one JSON line per exchange (the result, or the error it raised)."""
    from tests.core import sdk_exchange

    exchanges = {**sdk_exchange.EXCHANGES, "mistral-conversations": mistral_conversations}
    sdk_exchange.EXCHANGES = exchanges  # main() looks the exchange up by name at call time
    for protocol, stream, via, store, scope, origin in configs:
        try:
            out = asyncio.run(sdk_exchange.main(protocol, stream, via, store, scope, origin))
        except Exception:
            out = {"error": traceback.format_exc()}
        print(json.dumps({"scope": scope, **out}), flush=True)
    return 0


#: What each process would import lazily: every SDK of ``sdk_exchange`` and the runtime's seams.
SDK_IMPORTS = [
    "tests.core.sdk_exchange",
    "openai",
    "anthropic",
    "httpx2",
    "google.genai",
    "google.genai.types",
    "mistralai.client",
    "boto3",
    "tether.stores.s3",
    "tether.wire.proxy",
    "tether.wire.transport",
]

VARIANTS = [(p, s, v, "local") for p in EXCHANGES for s in (False, True) for v in ("proxy", "transport")]
VARIANTS += [("openai-chat", s, v, "s3") for s in (False, True) for v in ("proxy", "transport")]


def _id(variant) -> str:
    protocol, stream, via, store = variant
    return f"{protocol}-{'stream' if stream else 'plain'}-{via}-{store}"


def _run_batch(zygote: Zygote, configs: list[list], workdir, name: str) -> dict[str, dict]:
    proc = zygote.run(configs, workdir, name, timeout_s=240)
    results = {}
    for line in proc["stdout"].splitlines():
        if line.startswith("{"):
            out = json.loads(line)
            results[out["scope"]] = out
    for config in configs:  # a crashed process leaves its variants without a result
        results.setdefault(config[4], {"error": f"exit {proc['exit']}, signal {proc['signal']}: {proc['stderr'][-3000:]}"})
    return results


@pytest.fixture(scope="module")
def replays(tmp_path_factory, s3_endpoint):
    """Run every variant twice (two processes per batch) and collect what each attempt saw."""
    base = tmp_path_factory.mktemp("replay")
    local_store = str(base / "store")
    stores = {"local": local_store}
    if any(v[3] == "s3" for v in VARIANTS):
        stores["s3"] = f"s3://{new_bucket(s3_endpoint)}/tether?endpoint_url={s3_endpoint}"
    providers = {_id(v): FakeProvider(SCRIPT).start() for v in VARIANTS}
    warmer = FakeProvider(SCRIPT).start()
    zygotes: list[Zygote] = []
    local = threading.local()

    def zygote() -> Zygote:
        if not hasattr(local, "z"):
            local.z = Zygote("tests.core.test_replay:replay_batch", imports=SDK_IMPORTS, prepare="tether.wire.seam:tls_context")
            # Every SDK's first call (lazy imports, model schemas) once in the zygote, through the
            # in-process transport (the proxy would start a thread) into a store of its own.
            local.z.warm(
                [
                    [p, s, "transport", str(base / "warm"), f"warm-{id(local.z)}-{p}-{s}", warmer.url]
                    for p in EXCHANGES
                    for s in (False, True)
                ]
            )
            zygotes.append(local.z)
        return local.z

    try:
        batches: dict[tuple, list[list]] = {}
        for v in VARIANTS:
            protocol, stream, via, store = v
            batches.setdefault((protocol, store), []).append([protocol, stream, via, stores[store], _id(v), providers[_id(v)].url])
        ledgers: dict[str, list] = {}

        def pair(configs: list[list]) -> tuple[dict, dict]:
            name = f"{configs[0][0]}-{configs[0][3] == local_store}"
            first = _run_batch(zygote(), configs, base, f"{name}-first")
            for c in configs:  # the ledger as the recording process left it
                ledgers[c[4]] = providers[c[4]].ledger.snapshot()
            second = _run_batch(zygote(), configs, base, f"{name}-second")
            return first, second

        with ThreadPoolExecutor(2) as pool:
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
        for p in [*providers.values(), warmer]:
            p.stop()
        for z in zygotes:
            z.close()


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

    # What the store holds for this run: two model records, both intact, each stored once (in the
    # pack: the loose copies went once it was durable), and two attempt markers.
    st = open_store(stores[store])
    keys = st.list(f"journal/{_id(variant)}/")
    recs = read_records(st, _id(variant))
    assert len(recs) == 2 and len([k for k in keys if "/attempts/" in k]) == 2, keys
    assert not [k for k in keys if k.endswith(".rec")], keys
    for record in recs:
        assert record.kind == "model" and record.outcome == "ok" and record.attempt == 1
        assert record.response["streamed"] == stream
        assert record.response["protocol"] == protocol
