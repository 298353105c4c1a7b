"""Crash-resume: the reference scenario, killed after the last step was recorded, then run again.

    python benchmarks/crash_resume.py [--scale 1.0] [--store DIR_OR_S3_URL] [--via transport|proxy]

The loop is ``tether.testing.chat_loop`` with the real ``openai`` SDK against the fake provider:
turn 1 asks for two tools (``get_weather`` sleeping 5.1 s and ``lookup`` sleeping 16.6 s, × scale),
turn 2 answers. Attempt 1 is SIGKILLed with ``--kill-after-step 4`` (model, tool, tool, model):
after the second tool finished and the final model turn was recorded, before the answer is
returned. Attempt 2 runs the same command to completion.

Figures: live model calls and tool executions on the retry (goal 0 and 0), the first attempt's
and the retry's wall time (each a whole process, start to exit), the time Tether spends replaying
inside the retry (runtime start → finish, as the retry reports it), and retry / first attempt
(goal ≤ 1/400 at full scale, replay ≤ 50 ms). Because a retry is a new Python process that must
import the ``openai`` SDK, the floor of that process — the interpreter plus the same imports,
measured here too — is printed beside it, and so is a retry run inside an already-started
process. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import save  # noqa: E402

QUESTION = "What is the weather in Paris, and what do we know about its museums?"
SCRIPT = {
    "conversations": [
        {
            "match": "Paris",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "lookup", "arguments": {"topic": "Paris museums"}},
                    ]
                },
                {"text": "Sunny in Paris, 21 °C; its museums are well documented."},
            ],
        }
    ]
}


def wall(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - started, done


def in_process_retries(store_url: str, scope: str, upstream: str, via: str, answer: str, n: int = 3) -> tuple[float, float]:
    import asyncio
    import functools

    from tether import run as run_module
    from tether.testing import chat_loop
    from tether.wire.seam import WireSeam

    spent = [0.0]

    def timed_sync(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t

        return wrapper

    def timed_async(fn):
        @functools.wraps(fn)
        async def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return await fn(*a, **k)
            finally:
                spent[0] += time.perf_counter() - t

        return wrapper

    ns = chat_loop.parser().parse_args(
        ["--store", store_url, "--scope", scope, "--upstream", upstream, "--question", QUESTION, "--model", "gpt-4o-mini", "--via", via]
    )
    asyncio.run(chat_loop.main_async(ns))  # warm-up: the SDK's first call imports more of it
    patches = [(run_module.Run, "__init__", timed_sync), (WireSeam, "handle", timed_async), (chat_loop, "call_tool", timed_async)]
    originals = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, wrap in patches:
        setattr(obj, name, wrap(getattr(obj, name)))
    best = (float("inf"), 0.0)
    try:
        for _ in range(n):
            spent[0] = 0.0
            started = time.perf_counter()
            out = asyncio.run(chat_loop.main_async(ns))
            elapsed = (time.perf_counter() - started) * 1000
            assert out["model_live"] == 0 and out["tool_live"] == 0 and out["answer"] == answer
            best = min(best, (elapsed, spent[0] * 1000))
    finally:
        for obj, name, fn in originals:
            setattr(obj, name, fn)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the tool sleeps (5.1 s, 16.6 s)")
    p.add_argument("--store", default=None, help="store URL (default: a fresh temp directory)")
    p.add_argument("--via", choices=["transport", "proxy"], default="transport")
    p.add_argument("--latency", type=float, default=0.0, help="fake provider latency per model turn, seconds")
    args = p.parse_args()

    from tether.journal import read_records
    from tether.stores import open_store
    from tether.testing import FakeProvider

    tmp = Path(tempfile.mkdtemp(prefix="tether-crash-resume-"))
    store_url = args.store or str(tmp / "store")
    scope = f"crash-resume-{os.getpid()}-{int(time.time())}"
    tool_log = tmp / "tools.jsonl"
    env = {**os.environ, "TETHER_TOOL_LOG": str(tool_log), "PYTHONPATH": str(ROOT)}
    sleeps = {"get_weather": 5.1 * args.scale, "lookup": 16.6 * args.scale}

    with FakeProvider(SCRIPT, latency=args.latency) as provider:
        base = [
            sys.executable,
            "-m",
            "tether.testing.chat_loop",
            "--store",
            store_url,
            "--scope",
            scope,
            "--upstream",
            provider.url + "/openai",
            "--question",
            QUESTION,
            "--via",
            args.via,
        ]
        for name, secs in sleeps.items():
            base += ["--tool-sleep", f"{name}={secs}"]

        first_s, first = wall([*base, "--kill-after-step", "4"], env)
        if first.returncode != -signal.SIGKILL:
            print(first.stdout, first.stderr, file=sys.stderr)
            raise SystemExit(f"attempt 1 was not SIGKILLed (exit {first.returncode})")
        turns = provider.ledger.snapshot()
        assert [e.turn for e in turns] == [0, 1], "expected turn 1 = two tool calls, turn 2 = the answer"
        store = open_store(store_url)
        recorded = read_records(store, scope)
        executions_before = len(tool_log.read_text().splitlines())

        retry_s, retry = wall(base, env)
        if retry.returncode != 0:
            print(retry.stdout, retry.stderr, file=sys.stderr)
            raise SystemExit(f"the retry failed (exit {retry.returncode})")
        out = json.loads(retry.stdout.strip().splitlines()[-1])
        live_on_retry = provider.live_calls() - len(turns)
        reexecutions = len(tool_log.read_text().splitlines()) - executions_before

        # The same retry inside a process that has already imported everything and called the
        # SDK once (its first call imports more of itself): attempts 3-5, best of three. Tether's
        # own share is timed around its entry points: the run (journal load), the wire seam and
        # the tool seam.
        warm_ms, tether_ms = in_process_retries(store_url, scope, provider.url + "/openai", args.via, out["answer"])

    # The floor of a retry process: the interpreter and the imports chat_loop needs.
    floor_python_s, _ = wall([sys.executable, "-c", "pass"])
    floor_imports_s, _ = wall([sys.executable, "-c", "import openai, tether.testing.chat_loop, tether.wire.transport"], env)

    kinds = sorted(r.kind for r in recorded if r is not None)
    figures = {
        "scale": args.scale,
        "via": args.via,
        "store": "s3" if store_url.startswith("s3://") else "local",
        "records_after_kill": {"model": kinds.count("model"), "tool": kinds.count("tool")},
        "live_model_calls_on_retry": live_on_retry,
        "tool_reexecutions": reexecutions,
        "first_attempt_s": round(first_s, 3),
        "retry_s": round(retry_s, 3),
        "replay_ms": round(out["replay_ms"], 2),
        "ratio": round(retry_s / first_s, 5),
        "ratio_inverse": round(first_s / retry_s, 1),
        "retry_in_started_process_ms": round(warm_ms, 2),
        "tether_share_of_that_ms": round(tether_ms, 2),
        "retry_process_floor_s": round(floor_imports_s, 3),
        "python_start_s": round(floor_python_s, 3),
    }
    print(f"reference scenario, tools {sleeps['get_weather']:.2f} s + {sleeps['lookup']:.2f} s, via {args.via}, {figures['store']} store")
    print(f"  records after the kill:        {figures['records_after_kill']}")
    print(f"  first attempt (killed):        {first_s:8.3f} s")
    print(f"  retry (whole process):         {retry_s:8.3f} s   live model calls {live_on_retry}, tool re-executions {reexecutions}")
    print(f"    of which Tether replaying:   {out['replay_ms']:8.2f} ms  (runtime start → finish, in the retry)")
    print(
        f"    process floor:               {floor_imports_s:8.3f} s   (python + import openai + tether; bare python {floor_python_s:.3f} s)"
    )
    print(f"  retry in a started process:    {warm_ms:8.2f} ms  (of which in Tether: {tether_ms:.2f} ms; the rest is the SDK)")
    print(
        f"  ratio retry / first attempt:   1/{first_s / retry_s:.0f}   (replay alone: 1/{first_s * 1000 / max(out['replay_ms'], 1e-3):.0f}; goal 1/400)"
    )
    save(f"crash_resume-{args.via}", figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
