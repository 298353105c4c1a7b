"""Operator benchmark: apply -> execution submitted, and memory with 1,000 AgentRuns.

Starts its own etcd + kube-apiserver (tests/support/kube.py), installs the CRDs, runs
`python -m tether_operator` as a process, then:

1. latency: creates 100 AgentRuns one after another; for each, the time from sending the create
   request to the watch event in which `status.execution.name` is set (the executor accepted
   it). p50/p95/max.
2. memory: adds AgentRuns up to 1,000 (these wait for a Secret that never comes, so each keeps a
   live kopf daemon: the operator's worst case short of running them) and reads the operator
   process's RSS (children excluded) from /proc.

The runs' executions really start (`python -m tether exec`, executor concurrency 1, a model URL
nobody listens on) so the operator does its whole job; only the submit path is timed.

    V=$(scripts/env.sh core); $V/bin/python benchmarks/operator_submit.py [--runs 100] [--total 1000]

Prints the figures, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.results import save  # noqa: E402
from tests.support.kube import free_port, start_control_plane  # noqa: E402

NS = "bench"
MODEL_URL = "http://127.0.0.1:9/v1"  # nobody listens: only the submit path is timed


def rss_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def manifest(name: str, waiting: bool) -> dict:
    model: dict[str, Any] = {"name": "gpt-4.1", "baseURL": MODEL_URL}
    if waiting:
        model["apiKeySecretRef"] = {"name": "never-created", "key": "OPENAI_API_KEY"}
    return {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": name},
        "spec": {"framework": "openai", "model": model, "input": "hello", "retries": 0},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="runs timed apply -> submitted")
    parser.add_argument("--total", type=int, default=1000, help="AgentRuns present for the memory figure")
    args = parser.parse_args()

    import kubernetes

    work = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    cp = start_control_plane(work / "cp")
    operator = None
    try:
        cp.kubectl("apply", "-f", str(REPO / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "crd/agentruns.tether.dev")
        cp.kubectl("create", "namespace", NS)
        env = {
            **os.environ,
            "KUBECONFIG": str(cp.kubeconfig),
            "TETHER_NAMESPACES": NS,
            "TETHER_STORE_URL": f"file://{work}/store",
            "TETHER_WORKDIR": str(work / "executions"),
            "TETHER_EXECUTOR": "local",  # the figures were measured with it (the chart's default is kubernetes)
            "TETHER_CONCURRENCY": "1",
            "TETHER_HEALTH_PORT": str(free_port()),
            "TETHER_METRICS_PORT": str(metrics_port := free_port()),
            # admission refuses a loopback baseURL unless an admin allows it (the runs' is on loopback)
            "TETHER_ALLOWED_BASE_URLS": json.dumps([MODEL_URL]),
            "TETHER_RECHECK_SECONDS": "30",
            "TETHER_MAX_RECHECK_SECONDS": "120",
        }
        log = (work / "operator.log").open("wb")
        operator = subprocess.Popen(
            [sys.executable, "-m", "tether_operator"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        while "Initial authentication has finished" not in (work / "operator.log").read_text():
            if operator.poll() is not None:
                raise SystemExit((work / "operator.log").read_text())
            time.sleep(0.1)
        time.sleep(1.0)  # let the watches settle
        baseline = rss_kib(operator.pid)

        kubernetes.config.load_kube_config(str(cp.kubeconfig))
        api = kubernetes.client.CustomObjectsApi()
        submitted: dict[str, float] = {}
        seen = threading.Condition()

        def watch() -> None:
            w = kubernetes.watch.Watch()
            try:
                for event in w.stream(api.list_namespaced_custom_object, "tether.dev", "v1alpha1", NS, "agentruns", timeout_seconds=3600):
                    obj = event["object"]
                    name = obj["metadata"]["name"]
                    if (obj.get("status") or {}).get("execution", {}).get("name") and name not in submitted:
                        with seen:
                            submitted[name] = time.perf_counter()
                            seen.notify_all()
            except Exception:  # the control plane stops at the end
                pass

        threading.Thread(target=watch, daemon=True).start()
        time.sleep(0.5)

        latencies = []
        for i in range(args.runs):
            name = f"timed-{i:04d}"
            t0 = time.perf_counter()
            api.create_namespaced_custom_object("tether.dev", "v1alpha1", NS, "agentruns", manifest(name, False))
            with seen:
                if not seen.wait_for(lambda: name in submitted, timeout=60):
                    raise SystemExit(f"{name} was not submitted within 60 s")
            latencies.append(submitted[name] - t0)
        after_timed = rss_kib(operator.pid)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda i: api.create_namespaced_custom_object(
                        "tether.dev", "v1alpha1", NS, "agentruns", manifest(f"waiting-{i:04d}", True)
                    ),
                    range(args.total - args.runs),
                )
            )
        create_seconds = time.perf_counter() - t0

        # Wait until the operator has looked at every run (observedGeneration set).
        def looked_at() -> int:
            items = cast(dict[str, Any], api.list_namespaced_custom_object("tether.dev", "v1alpha1", NS, "agentruns"))["items"]
            return sum((o.get("status") or {}).get("observedGeneration", -1) >= 1 for o in items)

        deadline = time.monotonic() + 600
        while (n := looked_at()) < args.total and time.monotonic() < deadline:
            time.sleep(2)
        settle_seconds = time.perf_counter() - t0
        time.sleep(5)
        with_total = rss_kib(operator.pid)
        import urllib.request

        metrics_text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
        patches = next(
            float(line.split()[1]) for line in metrics_text.splitlines() if line.startswith("tether_operator_status_patches_total ")
        )

        lat_ms = sorted(x * 1000 for x in latencies)
        p = lambda q: lat_ms[min(len(lat_ms) - 1, int(round(q * (len(lat_ms) - 1))))]  # noqa: E731
        result = {
            "benchmark": "operator_submit",
            "runs_timed": len(lat_ms),
            "submit_p50_ms": round(statistics.median(lat_ms), 1),
            "submit_p95_ms": round(p(0.95), 1),
            "submit_max_ms": round(lat_ms[-1], 1),
            "agentruns_present": args.total,
            "agentruns_looked_at": n,
            "seconds_to_look_at_all": round(settle_seconds, 1),
            "create_seconds": round(create_seconds, 1),
            "rss_mib_idle": round(baseline["VmRSS"] / 1024, 1),
            "rss_mib_after_timed_runs": round(after_timed["VmRSS"] / 1024, 1),
            "rss_mib_with_all_runs": round(with_total["VmRSS"] / 1024, 1),
            "rss_mib_peak": round(with_total["VmHWM"] / 1024, 1),
            "status_patches_total": int(patches),
            "cpus": os.cpu_count(),
        }
        print(
            f"apply -> submitted over {len(lat_ms)} runs: p50 {result['submit_p50_ms']} ms, "
            f"p95 {result['submit_p95_ms']} ms, max {result['submit_max_ms']} ms"
        )
        print(
            f"operator RSS: idle {result['rss_mib_idle']} MiB, after {args.runs} runs "
            f"{result['rss_mib_after_timed_runs']} MiB, with {args.total} AgentRuns "
            f"{result['rss_mib_with_all_runs']} MiB (peak {result['rss_mib_peak']} MiB)"
        )
        print(
            f"{n}/{args.total} runs looked at {result['seconds_to_look_at_all']} s after the bulk "
            f"create began; {result['status_patches_total']} status patches in all"
        )
        save("operator_submit", result)
        print(json.dumps(result))
        return 0
    finally:
        if operator is not None and operator.poll() is None:
            os.killpg(operator.pid, signal.SIGTERM)
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(operator.pid, signal.SIGKILL)
        cp.stop()


if __name__ == "__main__":
    sys.exit(main())
