"""Metrics overhead: what the operator's Prometheus metrics cost, per live turn and per look.

The metrics are the operator's: a live turn in the runtime gains one comparison (the progress
record's `firstReplayAt`, set on the first replayed step), measured here as `runtime_step_ns`,
the whole step counter call that holds it. What the operator pays instead is per progress update:
on each look at a run (every 0.5 s while it runs) it reads the progress record anyway; the
metrics add the run's account (`RunAccount.execution/progress/approvals`: what is new since the
last read) and the counting store wrapper around that read. Measured in process, against a
local store, with a progress record as the runtime writes it:

    look_us               the look without metrics: store get + parse of the progress record
    metrics_us            what the metrics add to one look (account + store counting)
    metrics_pct_of_look   metrics_us / look_us
    metrics_pct_of_turn   metrics_us / a 50 ms model turn (one look per turn at most): goal ≤ 1 %
    render_ms             one scrape of /metrics with --runs runs known (10 namespaces, every series set)

    V=$(scripts/env.sh core); $V/bin/python benchmarks/metrics_overhead.py [--updates 20000] [--runs 1000] [--repeat 5]

Prints the figures, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.results import save  # noqa: E402
from tether.contract import Progress, progress_key  # noqa: E402
from tether.journal import Counters  # noqa: E402
from tether.stores import LocalStore  # noqa: E402
from tether_operator import metrics  # noqa: E402

TURN_MS = 50.0


def record(step: int) -> bytes:
    """A progress record after `step` steps, shaped as tether.progress.snapshot writes it."""
    doc = {
        "phase": "Running",
        "attempt": 1,
        "steps": {"modelLive": step, "modelReplayed": 0, "toolLive": step // 2, "toolReplayed": 0, "normalisedParts": 0},
        "usage": {
            "inputTokens": 900 * step,
            "outputTokens": 120 * step,
            "cachedInputTokens": 0,
            "cacheWriteTokens": 0,
            "liveTokens": 1020 * step,
            "replayedTokens": 0,
            "costUSD": 0.0004 * step,
            "liveCostUSD": 0.0004 * step,
            "savedUSD": 0.0,
            "runLiveCostUSD": 0.0004 * step,
            "runUnknownCostTurns": 0,
            "unpricedModels": [],
            "unknownCostTurns": 0,
            "unknownSavedTurns": 0,
        },
        "approvals": [],
        "updatedAt": time.time(),
    }
    return json.dumps(doc).encode()


def per_call_us(fn, n: int, repeat: int) -> float:
    """Median over `repeat` rounds of the mean microseconds per call."""
    rounds = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for i in range(n):
            fn(i)
        rounds.append((time.perf_counter_ns() - start) / n / 1000)
    return statistics.median(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=20000, help="progress updates timed per round")
    parser.add_argument("--runs", type=int, default=1000, help="runs known to the scraped endpoint")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        plain = LocalStore(tmp, fsync=False)
        counted = metrics.CountedStore(plain)
        key = progress_key("bench-run")
        plain.put(key, record(3))

        def look(_: int) -> None:  # what the operator does on each look anyway
            Progress.model_validate_json(plain.get(key) or b"")

        look_us = per_call_us(look, args.updates, args.repeat)
        # The wrapper alone (a store get costs tens of µs and varies more than the wrapper costs):
        # the same counted call around a function that returns at once, minus that call.
        wrapped = metrics.CountedStore(plain)
        bare_us = per_call_us(lambda _: None, args.updates, args.repeat)
        store_us = max(0.0, per_call_us(lambda _: wrapped._call("get", lambda: None), args.updates, args.repeat) - bare_us)
        assert counted.get(key) == plain.get(key)  # the wrapped read is the same read

        # The account: each update a new record (one step more), as while a run makes progress.
        records = [Progress.model_validate_json(record(i + 1)) for i in range(args.updates)]
        rounds = []
        for r in range(args.repeat):
            account = metrics.RunAccount(f"bench-{r}", "openai", "kubernetes", {})
            start = time.perf_counter_ns()
            for progress in records:
                account.execution(1, 0, (), queued=False)
                account.progress(progress)
                account.approvals(())
            rounds.append((time.perf_counter_ns() - start) / len(records) / 1000)
        account_us = statistics.median(rounds)

    metrics_us = account_us + store_us

    # One scrape with --runs runs known: every family with series in 10 namespaces.
    for i in range(args.runs):
        ns = f"team-{i % 10}"
        metrics.RUNS.set(f"uid-{i}", ns, "openai", ("Running", "Succeeded", "Failed")[i % 3])
        account = metrics.RunAccount(ns, "openai", "kubernetes", {})
        account.execution(1, 0, (), queued=False)
        account.progress(Progress.model_validate_json(record(3)))
        account.finish("Succeeded", "Succeeded")
    render_ms = statistics.median(_timed_render() for _ in range(args.repeat))

    counters = Counters()
    step_ns = per_call_us(lambda _: counters.count("model", replayed=False), args.updates, args.repeat) * 1000

    figures = {
        "updates_timed": args.updates,
        "runs_scraped": args.runs,
        "look_us": round(look_us, 2),
        "account_us": round(account_us, 2),
        "store_counting_us": round(store_us, 2),
        "metrics_us": round(metrics_us, 2),
        "metrics_pct_of_look": round(100 * metrics_us / look_us, 2),
        "metrics_pct_of_turn": round(100 * metrics_us / (TURN_MS * 1000), 4),
        "render_ms": round(render_ms, 2),
        "runtime_step_ns": round(step_ns, 1),
    }
    print(f"a look at a run without metrics (get + parse progress): {look_us:.1f} µs")
    print(f"what the metrics add to it: {metrics_us:.2f} µs (account {account_us:.2f}, store counting {store_us:.2f})")
    print(f"  = {figures['metrics_pct_of_look']} % of the look, {figures['metrics_pct_of_turn']} % of a {TURN_MS:g} ms turn (goal ≤ 1 %)")
    print(f"/metrics with {args.runs} runs: {render_ms:.2f} ms per scrape")
    print(f"runtime, per step (the counter that notes the first replay): {step_ns:.0f} ns")
    save("metrics_overhead", figures)
    print(json.dumps(figures))
    return 0


def _timed_render() -> float:
    start = time.perf_counter()
    metrics.render(lambda: ["Running"] * 100)
    return (time.perf_counter() - start) * 1000


if __name__ == "__main__":
    sys.exit(main())
