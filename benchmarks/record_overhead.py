"""Recording overhead of a live model turn: through Tether vs straight to the provider.

    python benchmarks/record_overhead.py [--calls 40] [--turns 8] [--latency 0.05] [--s3-latency 0.02] [--no-s3] [--no-fsync]

The same ``openai`` SDK call (``chat.completions.create``, and the streamed variant) is made
against the fake provider with 50 ms latency three ways: with durability off (the SDK straight to
the provider, no run), through Tether's in-process transport, and through the loopback proxy; and
each of the two Tether ways once more as a bare hop (a provider name no wire protocol claims, so
the seam forwards the call and records nothing): ``rec`` compares a recorded call with that hop,
which is what recording itself costs apart from the way in (the proxy's loopback HTTP hop is the
price of reaching an SDK Tether cannot hand a client, with or without a journal). One more way is
the floor of any such hop written in Python: a minimal forwarder on the proxy's thread (an aiohttp
server relaying to an aiohttp client, the bytes untouched; no seam, no run, nothing recorded).
Every call through Tether is live (a new question each time) and recorded: the answer is handed
back while its record is written, and the next answer is handed back only once that write is
durable (tether.wire.seam). So each way makes ``--turns`` calls back to back, like an agent's
turns: a write that the next call does not hide shows up in that call's time. Blocks are
interleaved (off, transport, proxy, off, ...) so drift in the machine's load hits all ways alike;
the medians per call are compared. Goal: ratio ≤ 1.02. Also printed: the wait at the end of a
block for the last answer's write (what the end of a run waits for, once per run). The last line
is one JSON object.

Measured against two stores in one run: the local store, and S3 on loopback (a moto server this
script starts) with ``--s3-latency`` (20 ms) added before every S3 request — a botocore
``before-send`` hook that sleeps, so the request still goes out over HTTP to the real server; this
is what a store in another zone costs, and what loopback hides.

The local store fsyncs every record (a record must survive a node crash, not only a process
crash); ``--no-fsync`` shows what that costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from aiohttp import ClientSession, web  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from benchmarks.results import save  # noqa: E402
from tether.run import Run  # noqa: E402
from tether.stores import LocalStore, open_store  # noqa: E402
from tether.testing import FakeProvider, Script  # noqa: E402
from tether.wire.loop import run_on_wire_loop  # noqa: E402
from tether.wire.proxy import shared_proxy  # noqa: E402
from tether.wire.transport import transports_for  # noqa: E402

MODEL = "gpt-4o-mini"
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
]


def messages(tag: str, i: int) -> list[Any]:
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"[{tag}] question {i}: what is the weather like?"},
    ]


async def call(client: AsyncOpenAI, tag: str, i: int, stream: bool) -> float:
    started = time.perf_counter()
    completion: Any
    if stream:
        async with client.chat.completions.stream(model=MODEL, messages=messages(tag, i), tools=cast(Any, TOOLS)) as s:
            completion = await s.get_final_completion()
    else:
        completion = await client.chat.completions.create(model=MODEL, messages=messages(tag, i), tools=cast(Any, TOOLS))
    elapsed = time.perf_counter() - started
    assert completion.choices[0].message.content
    return elapsed


async def serve_forwarder(upstream: str) -> tuple[str, web.AppRunner]:
    """The minimal forwarder (see the module docstring), on the loop that runs this; its base URL."""
    session = ClientSession()
    skipped = {"host", "content-length", "transfer-encoding", "connection"}

    async def relay(request: web.Request) -> web.StreamResponse:
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in skipped]
        body = await request.read()
        async with session.request(request.method, upstream + request.path_qs, headers=headers, data=body) as answer:
            kept = {"content-type": answer.headers.get("content-type", "application/json")}
            if not kept["content-type"].startswith("text/event-stream"):
                return web.Response(status=answer.status, headers=kept, body=await answer.read())
            out = web.StreamResponse(status=answer.status, headers=kept)
            await out.prepare(request)
            async for chunk in answer.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", relay)
    app.on_cleanup.append(lambda _: session.close())
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return f"http://127.0.0.1:{runner.addresses[0][1]}", runner


async def measure(provider_url: str, forwarder_url: str, store, calls: int, turns: int, stream: bool) -> dict:
    upstream = provider_url + "/openai"
    # "unrecorded": a provider name no wire protocol claims, so the seam forwards its calls as it
    # forwards any request that is not a model turn: the same hop, nothing recorded.
    upstreams = {"openai": upstream, "unrecorded": upstream}
    run = Run(f"overhead-{'stream' if stream else 'plain'}-{time.time_ns()}", store, upstreams=upstreams, overlap_writes=True)

    def through(provider: str, way: str) -> AsyncOpenAI:
        if way == "proxy":
            return AsyncOpenAI(base_url=shared_proxy().base_url(run, provider) + "/v1", api_key="sk-bench", max_retries=0)
        # httpx2, as tether-openai hands it (the SDK's own HTTP library since openai 3.x).
        http = httpx2.AsyncClient(transport=transports_for(httpx2)[0](provider, run))
        return AsyncOpenAI(base_url=upstream + "/v1", api_key="sk-bench", max_retries=0, http_client=http)

    clients = {
        "direct": AsyncOpenAI(base_url=upstream + "/v1", api_key="sk-bench", max_retries=0),
        "transport": through("openai", "transport"),
        "transport_hop": through("unrecorded", "transport"),
        "proxy": through("openai", "proxy"),
        "proxy_hop": through("unrecorded", "proxy"),
        "forwarder": AsyncOpenAI(base_url=forwarder_url + "/v1", api_key="sk-bench", max_retries=0),
    }
    for way, client in clients.items():  # warm: connections, the SDK's lazy imports
        for i in range(3):
            await call(client, f"warm-{way}", i, stream)
    await run.seam.recorded()
    times: dict[str, list[float]] = {way: [] for way in clients}
    end_waits: dict[str, list[float]] = {way: [] for way in clients}
    order = list(clients)
    for block in range(max(1, calls // turns)):
        order = order[1:] + order[:1]  # rotate who goes first
        for way in order:
            for turn in range(turns):  # back to back: the next call meets the previous write
                times[way].append(await call(clients[way], way, block * turns + turn, stream))
            started = time.perf_counter()
            if way in ("transport", "proxy"):
                await run.seam.recorded()  # the last answer's write: what a run's end waits for
            end_waits[way].append(time.perf_counter() - started)
    live = run.counters.model_live
    assert run.counters.model_replayed == 0 and live == 2 * (len(times["direct"]) + 3), run.counters  # only openai's recorded
    shared_proxy().unregister(run)
    for client in clients.values():  # before this event loop closes
        await client.close()
    await run.aclose()
    direct = statistics.median(times["direct"])
    forwarder = statistics.median(times["forwarder"])
    out = {
        "direct_ms": round(direct * 1000, 3),
        "forwarder_ms": round(forwarder * 1000, 3),
        "forwarder_ratio": round(forwarder / direct, 4),
    }
    for way in ("transport", "proxy"):
        med, hop = statistics.median(times[way]), statistics.median(times[f"{way}_hop"])
        out[f"{way}_ms"] = round(med * 1000, 3)
        out[f"{way}_ratio"] = round(med / direct, 4)
        out[f"{way}_overhead_ms"] = round((med - direct) * 1000, 3)
        out[f"{way}_end_wait_ms"] = round(statistics.median(end_waits[way]) * 1000, 3)
        # The same hop with nothing recorded: what recording itself adds, apart from the hop.
        out[f"{way}_hop_ms"] = round(hop * 1000, 3)
        out[f"{way}_recording_ratio"] = round(med / hop, 4)
    return out


@contextmanager
def provider_process(latency: float, in_process: bool) -> Iterator[str]:
    """The fake provider's URL. In its own process by default, as a real provider is: in this
    one it would share the interpreter lock with the recording threads (and with the SDK), and
    every answer it computes would slow the process being measured."""
    if in_process:
        with FakeProvider(Script.text("Sunny, 21 °C."), latency=latency) as provider:
            yield provider.url
        return
    command = [sys.executable, "-m", "tether.testing.fake_provider", "--latency", str(latency)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        try:
            line = process.stdout.readline() if process.stdout else ""
            if not line.startswith("READY "):
                raise RuntimeError(f"the fake provider did not start: {line!r}")
            yield line.split()[1]
        finally:
            process.terminate()


def write_probe(store) -> float:
    """Median time of one durable record write on ``store``, ms (the part recording cannot hide)."""
    payload = b"x" * 1500
    writes = []
    for i in range(20):
        t = time.perf_counter()
        store.create(f"probe/{time.time_ns()}-{i}", payload)
        writes.append(time.perf_counter() - t)
    return round(statistics.median(writes) * 1000, 3)


def s3_with_latency(stack: ExitStack, latency: float):
    """An S3 store on a moto server on loopback; every S3 request waits ``latency`` s before it is sent."""
    from tests.support.s3 import new_bucket, s3_server, set_aws_env

    set_aws_env()
    endpoint = stack.enter_context(s3_server())
    store: Any = open_store(f"s3://{new_bucket(endpoint)}/bench?endpoint_url={endpoint}")  # an S3Store: its boto3 client

    def delay(request, **_):
        time.sleep(latency)

    store.client.meta.events.register("before-send.s3", delay)
    stack.callback(store.client.meta.events.unregister, "before-send.s3", delay)
    return store


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=40, help="timed calls per way and variant")
    p.add_argument("--turns", type=int, default=8, help="calls back to back per block")
    p.add_argument("--latency", type=float, default=0.05, help="fake provider latency, seconds")
    p.add_argument("--s3-latency", type=float, default=0.02, help="added before every S3 request, seconds")
    p.add_argument("--no-s3", action="store_true", help="skip the S3 store")
    p.add_argument("--no-fsync", action="store_true", help="local store without fsync")
    p.add_argument(
        "--in-process-provider", action="store_true", help="run the fake provider in this process (it then competes for the GIL)"
    )
    args = p.parse_args()

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tether-overhead-")))
        stores = {"local": LocalStore(tmp / "store", fsync=not args.no_fsync)}
        if not args.no_s3:
            stores["s3"] = s3_with_latency(stack, args.s3_latency)
        shared_proxy()
        provider = stack.enter_context(provider_process(args.latency, args.in_process_provider))
        forwarder, runner = run_on_wire_loop(serve_forwarder(provider + "/openai"))
        stack.callback(lambda: run_on_wire_loop(runner.cleanup()))
        figures: dict = {
            "latency_s": args.latency,
            "fsync": not args.no_fsync,
            "provider": "in process" if args.in_process_provider else "own process",
        }
        if not args.no_s3:
            figures["s3_latency_s"] = args.s3_latency
        for name, store in stores.items():
            figures[name] = {
                "record_write_ms": write_probe(store),
                "plain": asyncio.run(measure(provider, forwarder, store, args.calls, args.turns, False)),
                "stream": asyncio.run(measure(provider, forwarder, store, args.calls, args.turns, True)),
            }
    print(
        f"live turn with {args.latency * 1000:.0f} ms provider latency; medians of {args.calls} calls per way, {args.turns} back to back per block"
    )
    print("  ratio: against durability off; rec: against the same hop with nothing recorded; floor: a minimal Python forwarder")
    print(
        f"  {'store':<36}{'':<8}{'off ms':>9}{'transport ms':>14}{'ratio':>8}{'rec':>7}"
        f"{'proxy ms':>10}{'ratio':>8}{'rec':>7}{'floor':>7}{'end wait ms':>13}"
    )
    for name in stores:
        label = f"local{'' if args.no_fsync else ' (fsync)'}" if name == "local" else f"s3 (+{args.s3_latency * 1000:.0f} ms/request)"
        label += f", write {figures[name]['record_write_ms']:.1f} ms"
        for variant in ("plain", "stream"):
            f = figures[name][variant]
            print(
                f"  {label:<36}{variant:<8}{f['direct_ms']:>9.2f}{f['transport_ms']:>14.2f}{f['transport_ratio']:>8.3f}"
                f"{f['transport_recording_ratio']:>7.3f}{f['proxy_ms']:>10.2f}{f['proxy_ratio']:>8.3f}"
                f"{f['proxy_recording_ratio']:>7.3f}{f['forwarder_ratio']:>7.3f}{f['transport_end_wait_ms']:>13.2f}"
            )
            label = ""
    met = {
        name: all(figures[name][v][f"{w}_ratio"] <= 1.02 for v in ("plain", "stream") for w in ("transport", "proxy")) for name in stores
    }
    recording = {
        name: all(figures[name][v][f"{w}_recording_ratio"] <= 1.02 for v in ("plain", "stream") for w in ("transport", "proxy"))
        for name in stores
    }
    verdict = ", ".join(f"{n} {'met' if ok else 'MISSED'}" for n, ok in met.items())
    print(f"  goal ratio <= 1.02 against durability off: {verdict}")
    verdict = ", ".join(f"{n} {'met' if ok else 'MISSED'}" for n, ok in recording.items())
    print(f"  recording alone (against the same hop) <= 1.02: {verdict}")
    figures["recording_goals_met"] = recording
    figures["goals_met"] = met
    save("record_overhead", figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
