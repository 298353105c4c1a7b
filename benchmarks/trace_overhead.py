"""Tracing overhead of a live model turn: a recorded turn with OpenTelemetry tracing on vs off.

    python benchmarks/trace_overhead.py [--calls 240] [--turns 8] [--latency 0.05]

The same ``openai`` SDK call (``chat.completions.create``, and the streamed variant) through
Tether's in-process transport against the fake provider (its own process, 50 ms latency), recorded
to the local store, two ways: a run without OTEL_* variables (no tracer: ``tether.telemetry``
does nothing) and a run exporting to a real OpenTelemetry Collector (scripts/otel-collector.sh:
OTLP over HTTP on loopback, a file exporter) with the standard batch processor settings — every
live turn a ``chat`` span with its GenAI attributes (the answer's id and finish reasons read from
its body), exported in the background. Blocks of ``--turns`` calls back to back alternate between
the two ways and a third, a second untraced run (``null``: its ratio to the first is the noise
floor of the comparison), so the machine's load hits all alike; medians per call are compared. Goal: ratio
≤ 1.01 (tracing costs at most 1 % of a 50 ms turn). Also printed: what the end of a traced
attempt waits for (its spans flushed to the collector), once per attempt. The last line is one
JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from benchmarks.record_overhead import call, provider_process  # noqa: E402
from benchmarks.results import save  # noqa: E402
from tests.support.otel import collector  # noqa: E402
from tests.support.wait import wait_for  # noqa: E402
from tether.run import Run  # noqa: E402
from tether.stores import LocalStore  # noqa: E402
from tether.telemetry import AttemptTrace  # noqa: E402
from tether.wire.transport import transports_for  # noqa: E402

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"


def new_run(store: LocalStore, upstream: str, endpoint: str | None) -> Run:
    """A run attempt; traced when ``endpoint`` is given (the variable is read when the run starts)."""
    if endpoint:
        os.environ[ENDPOINT] = endpoint
    try:
        return Run(f"trace-overhead-{time.time_ns()}", store, upstreams={"openai": upstream}, overlap_writes=True)
    finally:
        os.environ.pop(ENDPOINT, None)


async def measure(provider_url: str, endpoint: str, store: LocalStore, calls: int, turns: int, stream: bool) -> dict:
    upstream = provider_url + "/openai"
    # "null": a second untraced run, timed like the others: its ratio to "off" is the noise floor.
    runs = {"off": new_run(store, upstream, None), "traced": new_run(store, upstream, endpoint), "null": new_run(store, upstream, None)}
    assert type(runs["off"].trace).__name__ == "NoTrace" and type(runs["traced"].trace).__name__ == "AttemptTrace"
    clients = {
        way: AsyncOpenAI(
            base_url=upstream + "/v1",
            api_key="sk-bench",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transports_for(httpx2)[0]("openai", run)),
        )
        for way, run in runs.items()
    }
    for way, client in clients.items():  # warm: connections, the SDK's lazy imports, the exporter's first batch
        for i in range(3):
            await call(client, f"warm-{way}", i, stream)
    times: dict[str, list[float]] = {way: [] for way in clients}
    order = list(clients)
    for block in range(max(1, calls // turns)):
        order = order[1:] + order[:1]
        for way in order:
            for turn in range(turns):
                times[way].append(await call(clients[way], way, block * turns + turn, stream))
    for client in clients.values():
        await client.close()
    for run in runs.values():
        await run.aclose()
    started = time.perf_counter()
    await asyncio.to_thread(runs["traced"].trace.end, "succeeded")  # the attempt's span, then everything flushed
    flush = time.perf_counter() - started
    span_us = span_work(runs["traced"])
    traced_run = runs["traced"].trace
    assert isinstance(traced_run, AttemptTrace)  # an exporter is configured for this run
    await asyncio.to_thread(traced_run.flush)  # those spans too, while the collector listens
    off, traced, null = (statistics.median(times[way]) for way in ("off", "traced", "null"))
    return {
        "off_ms": round(off * 1000, 3),
        "traced_ms": round(traced * 1000, 3),
        "ratio": round(traced / off, 4),
        "null_ratio": round(null / off, 4),
        "overhead_ms": round((traced - off) * 1000, 3),
        "end_flush_ms": round(flush * 1000, 3),
        # Tracing's own work on a live turn (the span of one of the recorded turns, made again
        # and again), and its share of the untraced turn: the part of the ratio load cannot blur.
        "span_work_us": round(span_us, 1),
        "span_work_share": round(span_us / (off * 1e6), 5),
        "live_turns": runs["traced"].counters.model_live,
    }


def span_work(run: Run, repeat: int = 500) -> float:
    """Microseconds per ``chat`` span of a live turn: ``trace.turn`` on one of the run's records."""
    record = next(r for r in run.journal.records.values() if r.kind == "model")
    started = time.perf_counter()
    for _ in range(repeat):
        run.trace.turn(record, replayed=False, cost_usd=0.0)
    return (time.perf_counter() - started) / repeat * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=240, help="timed calls per way and variant")
    p.add_argument("--turns", type=int, default=8, help="calls back to back per block")
    p.add_argument("--latency", type=float, default=0.05, help="fake provider latency, seconds")
    args = p.parse_args()
    os.environ.pop(ENDPOINT, None)
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tether-trace-overhead-")))
        otel = stack.enter_context(collector(tmp))
        provider = stack.enter_context(provider_process(args.latency, False))
        store = LocalStore(tmp / "store")
        figures: dict = {"latency_s": args.latency, "receiver": "OpenTelemetry Collector (scripts/otel-collector.sh)"}
        for variant in ("plain", "stream"):
            figures[variant] = asyncio.run(measure(provider, otel.endpoint, store, args.calls, args.turns, variant == "stream"))
        sent = sum(figures[v]["live_turns"] for v in ("plain", "stream"))  # the span-work spans go too: at least these

        def chats() -> int:
            return len([s for s in otel.spans() if s.name.startswith("chat ")])

        wait_for(lambda: chats() >= sent, what="the collector to write every chat span")
        received = chats()
    figures["chat_spans_received"] = received
    print(
        f"live turn with {args.latency * 1000:.0f} ms provider latency, recorded; medians of {args.calls} calls per way, {args.turns} back to back per block"
    )
    print(
        f"  {'variant':<10}{'off ms':>9}{'traced ms':>11}{'ratio':>8}{'+ms':>8}{'null':>7}{'span work us':>14}{'share':>8}{'end flush ms':>14}"
    )
    for variant in ("plain", "stream"):
        f = figures[variant]
        print(
            f"  {variant:<10}{f['off_ms']:>9.2f}{f['traced_ms']:>11.2f}{f['ratio']:>8.3f}{f['overhead_ms']:>8.2f}{f['null_ratio']:>7.3f}"
            f"{f['span_work_us']:>14.1f}{f['span_work_share']:>8.2%}{f['end_flush_ms']:>14.2f}"
        )
    figures["goal_met"] = all(figures[v]["ratio"] <= 1.01 for v in ("plain", "stream"))
    figures["span_work_goal_met"] = all(figures[v]["span_work_share"] <= 0.01 for v in ("plain", "stream"))
    print(
        f"  goal ratio <= 1.01: {'met' if figures['goal_met'] else 'MISSED'}; span work <= 1 % of a turn: {'met' if figures['span_work_goal_met'] else 'MISSED'}"
    )
    print(f"  chat spans the collector received: {received}")
    save("trace_overhead", figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
