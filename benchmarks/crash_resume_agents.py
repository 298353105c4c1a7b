"""Crash-resume through the OpenAI Agents SDK adapter: the reference scenario as an AgentRun.

    python benchmarks/crash_resume_agents.py [--scale 1.0]

``tether exec`` (a Flyte local execution of the runtime task, as the operator's local executor
starts it) runs an ``agents.Agent`` against the fake provider: turn 1 asks for both tools
(5.1 s and 16.6 s × scale; the SDK runs them in parallel), turn 2 answers. The first attempt is
SIGKILLed right after step 4 (model, tool, tool, model) was recorded — both tools finished, the
answer not yet returned — and the same command runs again.

Figures: live model calls and tool executions on the retry (goal 0 and 0), wall time of each
attempt process, the runtime's replay time inside the retry (attempt start → end, no live step),
and retry / first attempt. A retry is a new process that imports Flyte and the Agents SDK before
Tether does anything: that floor is measured too (the same process importing the same modules and
exiting) and the ratio without it printed beside.

Then the same scenario again (its own run id) the way ``tether run`` retries by default: a warm
worker (``tether exec --warm``) is started beside the first attempt, imports everything and waits;
when the first attempt has died it is told ``go``. Its retry is timed from ``go`` to its outcome
in the caller's hands (the end of its output, as ``tether run`` reads it; the process was started
before it was needed, that is the point; the time to its exit is printed too), and its ratio printed beside the
cold one, with the worker's CPU time from ``go`` to its outcome (what the retry costs apart from
waiting for a core on a loaded machine). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import save  # noqa: E402

SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "get-weather", "arguments": {"city": "Paris"}},
                        {"name": "lookup", "arguments": {"topic": "Paris museums"}},
                    ]
                },
                {"text": "Sunny in Paris; its museums are well documented."},
            ],
        }
    ]
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scale", type=float, default=1.0)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "runtime" / "src"))
    from tether.testing.fake_provider import FakeProvider
    from tether.testing.script import Script

    work = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    tool_log = work / "tools.jsonl"
    tool_log.touch()
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        request = {
            "runId": "bench-agents",
            "namespace": "default",
            "name": "bench",
            "spec": {
                "framework": "openai",
                "model": {"name": "gpt-4o-mini", "provider": "openai", "baseURL": fake.base_url("openai")},
                "input": "What is the weather in Paris, and what do we know about its museums?",
                "tools": ["get-weather", "lookup"],
            },
            "tools": {
                "get-weather": {
                    "description": "Current weather in a city.",
                    "implementation": "reference_tools:get_weather",
                    "cache": "off",
                },
                "lookup": {"description": "Look a topic up.", "implementation": "reference_tools:lookup", "cache": "off"},
            },
        }
        (work / "request.json").write_text(json.dumps(request))
        (work / "request-warm.json").write_text(json.dumps({**request, "runId": "bench-agents-warm"}))
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "benchmarks"),
            "TETHER_TOOL_MODULES": "reference_tools",  # the benchmark's tools (tools.allowedModules)
            "TETHER_TOOL_LOG": str(tool_log),
            "TETHER_BENCH_SCALE": str(args.scale),
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
        }
        cmd = [sys.executable, "-m", "tether", "exec", str(work / "request.json"), "--store", str(work / "store")]

        def attempt(extra: dict) -> tuple[float, subprocess.CompletedProcess]:
            started = time.perf_counter()
            done = subprocess.run(cmd, env={**env, **extra}, capture_output=True, text=True)
            return time.perf_counter() - started, done

        first_s, first = attempt({"TETHER_KILL_AFTER_STEP": "4"})
        assert first.returncode == -9, first.stderr[-2000:]
        calls_before, tools_before = fake.live_calls(), len(tool_log.read_text().splitlines())
        retry_s, retry = attempt({})
        assert retry.returncode == 0, retry.stderr[-2000:]
        outcome = json.loads(retry.stdout.strip().splitlines()[-1])
        cold_live, cold_tools = fake.live_calls() - calls_before, len(tool_log.read_text().splitlines()) - tools_before
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import flyte, agents, tether.entrypoint, tether_openai"], env=env, check=True)
        floor_s = time.perf_counter() - started

        # The same scenario with a warm worker for the retry, started beside the first attempt.
        warm_cmd = [*cmd[:4], str(work / "request-warm.json"), *cmd[5:]]
        with (work / "warm.err").open("w") as log:  # a file: the worker's log never blocks it
            spare = subprocess.Popen([*warm_cmd, "--warm"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        started = time.perf_counter()
        warm_first = subprocess.run(warm_cmd, env={**env, "TETHER_KILL_AFTER_STEP": "4"}, capture_output=True, text=True)
        warm_first_s = time.perf_counter() - started
        assert warm_first.returncode == -9, warm_first.stderr[-2000:]
        warm_calls_before, warm_tools_before = fake.live_calls(), len(tool_log.read_text().splitlines())
        started = time.perf_counter()
        assert spare.stdin is not None and spare.stdout is not None
        spare.stdin.write("go\n")
        spare.stdin.close()
        out = spare.stdout.read()  # to its end: the worker closes its output once the outcome is printed
        warm_retry_s = time.perf_counter() - started
        spare.wait()
        warm_exit_s = time.perf_counter() - started
        assert spare.returncode == 0, (work / "warm.err").read_text()[-2000:]
        warm = json.loads(out.strip().splitlines()[-1])
        warm_live = fake.live_calls() - warm_calls_before
        warm_tools = len(tool_log.read_text().splitlines()) - warm_tools_before
    figures = {
        "live_model_calls_on_retry": cold_live,
        "tool_reexecutions": cold_tools,
        "first_attempt_s": round(first_s, 3),
        "retry_s": round(retry_s, 3),
        "replay_ms": outcome["replay_ms"],
        "ratio": round(retry_s / first_s, 5),
        "process_floor_s": round(floor_s, 3),
        "ratio_above_floor": round(max(retry_s - floor_s, 0) / first_s, 5),
        "model_replayed": outcome["model_replayed"],
        "tool_replayed": outcome["tool_replayed"],
        "scale": args.scale,
        "warm": {
            "live_model_calls_on_retry": warm_live,
            "tool_reexecutions": warm_tools,
            "first_attempt_s": round(warm_first_s, 3),
            "retry_s": round(warm_retry_s, 4),
            "retry_to_exit_s": round(warm_exit_s, 4),
            "replay_ms": warm["replay_ms"],
            "ratio": round(warm_retry_s / warm_first_s, 5),
            "worker_ready_before_go_s": round(warm["warm_worker"]["ready_before_go_ms"] / 1000, 2),
            "cpu_ms_after_go": warm["warm_worker"]["cpu_ms_after_go"],
        },
    }
    print(f"first attempt {first_s:.2f} s (killed after step 4), retry {retry_s:.2f} s: 1/{first_s / retry_s:.0f}")
    print(
        f"retry: {figures['live_model_calls_on_retry']} live model calls, {figures['tool_reexecutions']} tool re-executions, {outcome['model_replayed']} turns + {outcome['tool_replayed']} tools replayed in {outcome['replay_ms']:.1f} ms"
    )
    print(
        f"process floor (python + flyte + agents SDK imports) {floor_s:.2f} s; retry above it: {max(retry_s - floor_s, 0):.2f} s = 1/{first_s / max(retry_s - floor_s, 1e-3):.0f} of the first attempt"
    )
    w = figures["warm"]
    print(
        f"with a warm worker (started beside the first attempt, ready {w['worker_ready_before_go_s']:.1f} s before it was needed): "
        f"first attempt {warm_first_s:.2f} s, retry {warm_retry_s * 1000:.0f} ms from 'go' to its outcome: 1/{warm_first_s / warm_retry_s:.0f} "
        f"({warm_exit_s * 1000:.0f} ms to its exit) "
        f"(cold: 1/{first_s / retry_s:.0f}); {warm_live} live model calls, {warm_tools} tool re-executions, replay {warm['replay_ms']:.1f} ms; "
        f"the worker's CPU time from 'go' to its outcome {w['cpu_ms_after_go']:.0f} ms"
    )
    save("crash_resume_agents", figures)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
