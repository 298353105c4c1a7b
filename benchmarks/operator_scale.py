"""Operator benchmark: 2,000 AgentRuns applied at 20/s with the kubernetes executor (issue 27 item 3).

Starts its own etcd + kube-apiserver (tests/support/kube.py) and a moto S3 server (the store,
tests/support/s3.py), installs the CRDs, runs `python -m tether_operator` as a process with the
kubernetes executor and its default intervals, then applies `--runs` AgentRuns at `--rate` per
second. There is no kubelet: this script plays one cheaply, reporting each runner pod Running
(one `pods/status` patch) as soon as it appears, and plays each run's runtime the same way: one
progress record written to S3 when its pod runs (what the runtime writes at an attempt's start),
then nothing (a run waiting on its model). `--moving` of the runs take a step every 0.7-3 s after
that for `--moving-seconds`: the status lag is measured on them. The pods never end.

Printed:
- apply -> pod created: from sending the create request to the watch event of the runner pod
  (p50/p95/max over all runs), and when the last pod appeared after the first apply
- the operator process's RSS (peak, VmHWM; children excluded) and CPU (user + system, % of one
  core) over the whole benchmark
- status lag: from a progress write to the AgentRun watch event whose status.steps shows it (or
  a later step), p50/p95/max over the moving runs' writes
- store requests per second per active run: the operator's `tether_operator_store_requests_total`
  over `--window` seconds once every run is running (the moving runs included)
- error Events: Warning Events in the namespace, by reason (0 expected)

    V=$(scripts/env.sh core); $V/bin/python benchmarks/operator_scale.py [--runs 2000] [--rate 20] [--moving 50]

Prints the figures, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.operator_submit import rss_kib  # noqa: E402
from benchmarks.results import save  # noqa: E402
from tests.support.kube import free_port, start_control_plane  # noqa: E402
from tests.support.s3 import new_bucket, s3_server, set_aws_env  # noqa: E402
from tether.api import Steps  # noqa: E402
from tether.contract import RUN_LABEL, Progress  # noqa: E402
from tether.progress import write_progress  # noqa: E402
from tether.stores import open_store  # noqa: E402

NS = "bench"
IMAGE = "registry.example/tether-runtime:bench"
STEP_PAUSES = (0.7, 1.0, 1.5, 3.0, 0.7, 2.0, 1.0)  # a moving run's steps: turns and tool calls


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def store_requests(port: int) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith("tether_operator_store_requests_total{"))


def progress(steps: int) -> Progress:
    return Progress(phase="Running", attempt=1, steps=Steps(model_live=steps), updated_at=time.time())


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentRun",
        "metadata": {"name": name},
        "spec": {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", "image": IMAGE},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000, help="AgentRuns applied")
    parser.add_argument("--rate", type=float, default=20.0, help="applies per second")
    parser.add_argument("--moving", type=int, default=50, help="runs that take steps (the status lag's sample)")
    parser.add_argument("--moving-seconds", type=float, default=30.0, help="how long the moving runs take steps")
    parser.add_argument("--window", type=float, default=60.0, help="seconds over which store requests are counted")
    args = parser.parse_args()

    import kubernetes

    work = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    set_aws_env()
    s3 = s3_server()
    endpoint = s3.__enter__()
    cp = start_control_plane(work / "cp")
    operator = None
    stop = threading.Event()
    try:
        store_url = f"s3://{new_bucket(endpoint)}/bench?endpoint_url={endpoint}"
        store = open_store(f"s3://{store_url[5:].partition('?')[0]}/{NS}?endpoint_url={endpoint}")
        cp.kubectl("apply", "-f", str(REPO / "crds"))
        cp.kubectl("wait", "--for=condition=Established", "crd/agentruns.tether.dev")
        cp.kubectl("create", "namespace", NS)
        env = {
            **os.environ,
            "KUBECONFIG": str(cp.kubeconfig),
            "TETHER_NAMESPACES": NS,
            "TETHER_STORE_URL": store_url,
            "TETHER_EXECUTOR": "kubernetes",
            "TETHER_RUNTIME_IMAGE": IMAGE,
            "TETHER_TENANCY": "single-tenant",  # no admission policies on this bare apiserver; the runs name no Secret
            "TETHER_HEALTH_PORT": str(free_port()),
            "TETHER_METRICS_PORT": str(metrics_port := free_port()),
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
        cpu0, wall0 = cpu_seconds(operator.pid), time.monotonic()

        kubernetes.config.load_kube_config(str(cp.kubeconfig))
        client = kubernetes.client.ApiClient()
        client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
        custom = kubernetes.client.CustomObjectsApi(client)
        core = kubernetes.client.CoreV1Api(client)
        applied: dict[str, float] = {}
        pod_seen: dict[str, float] = {}
        uids: dict[str, str] = {}
        shown: dict[str, dict[int, float]] = {}  # run -> steps count -> first time status showed it
        lock = threading.Condition()
        kubelet = ThreadPoolExecutor(4)

        def start_pod(pod: str, run: str) -> None:  # the kubelet: the pod runs; the runtime writes its first record
            for _ in range(10):
                try:
                    core.patch_namespaced_pod_status(pod, NS, {"status": {"phase": "Running"}})
                    write_progress(store, uids[run], progress(1))
                    return
                except Exception as exc:  # a loaded apiserver may time out: try again
                    print(f"kubelet: {pod}: {exc}", file=sys.stderr)
                    time.sleep(1)

        def on_pod(event: dict[str, Any]) -> None:
            meta = event["object"].metadata
            run = (meta.labels or {}).get(RUN_LABEL)
            if event["type"] == "ADDED" and run and run not in pod_seen:
                with lock:
                    pod_seen[run] = time.perf_counter()
                    uids[run] = (meta.labels or {}).get("tether.dev/run-uid", "")
                    lock.notify_all()
                kubelet.submit(start_pod, meta.name, run)

        def on_run(event: dict[str, Any]) -> None:
            obj = event["object"]
            live = ((obj.get("status") or {}).get("steps") or {}).get("modelLive")
            if isinstance(live, int):
                with lock:
                    shown.setdefault(obj["metadata"]["name"], {}).setdefault(live, time.perf_counter())
                    lock.notify_all()

        def watching(listing: Any, handle: Any, *args: Any) -> Any:
            def loop() -> None:  # a watch the apiserver ends is started again (what it lists again is seen already)
                while not stop.is_set():
                    try:
                        for event in kubernetes.watch.Watch().stream(listing, *args, timeout_seconds=300):
                            if stop.is_set():
                                return
                            handle(event)
                    except Exception as exc:
                        if not stop.is_set():
                            print(f"watch: {exc}", file=sys.stderr)
                            time.sleep(0.5)

            return loop

        watch_pods = watching(core.list_namespaced_pod, on_pod, NS)
        watch_runs = watching(custom.list_namespaced_custom_object, on_run, "tether.dev", "v1alpha1", NS, "agentruns")
        for target in (watch_pods, watch_runs):
            threading.Thread(target=target, daemon=True).start()
        time.sleep(0.5)

        # Apply at --rate: each create is sent at its slot (a few senders so one slow answer does not hold the next).
        names = [f"run-{i:05d}" for i in range(args.runs)]
        t_first = time.perf_counter()

        def apply(i: int) -> None:
            delay = t_first + i / args.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            applied[names[i]] = time.perf_counter()
            custom.create_namespaced_custom_object("tether.dev", "v1alpha1", NS, "agentruns", manifest(names[i]))

        with ThreadPoolExecutor(8) as senders:
            list(senders.map(apply, range(args.runs)))
        apply_seconds = time.perf_counter() - t_first
        with lock:
            if not lock.wait_for(lambda: len(pod_seen) == args.runs, timeout=600):
                raise SystemExit(f"{args.runs - len(pod_seen)} runner pods missing 600 s after the applies")
        all_pods_s = max(pod_seen.values(), default=t_first) - t_first
        kubelet.shutdown(wait=True)
        with lock:  # every run's first record in status: all are running and looked at
            if not lock.wait_for(lambda: sum(1 in s for s in shown.values()) >= args.runs, timeout=600):
                raise SystemExit(f"{args.runs - sum(1 in s for s in shown.values())} runs do not show their progress after 600 s")
        all_running_s = time.perf_counter() - t_first

        # The moving runs take steps; status lag measured on them, store requests over the window.
        rng = random.Random(27)
        moving = rng.sample(names, min(args.moving, args.runs))
        written: list[tuple[str, int, float]] = []

        def move(run: str) -> None:
            steps, pauses = 1, list(STEP_PAUSES)
            time.sleep(rng.uniform(0, 3))
            end = time.perf_counter() + args.moving_seconds
            while time.perf_counter() < end and not stop.is_set():
                steps += 1
                write_progress(store, uids[run], progress(steps))
                written.append((run, steps, time.perf_counter()))
                time.sleep(pauses[steps % len(pauses)])

        requests_before, window_t0 = store_requests(metrics_port), time.perf_counter()
        movers = [threading.Thread(target=move, args=(run,), daemon=True) for run in moving]
        for t in movers:
            t.start()
        time.sleep(args.window)
        requests_in_window = store_requests(metrics_port) - requests_before
        window_s = time.perf_counter() - window_t0
        for t in movers:
            t.join()
        with lock:
            last = {run: steps for run, steps, _ in written}
            lock.wait_for(lambda: all(max(shown.get(r, {0: 0})) >= n for r, n in last.items()), timeout=60)
        lags = []
        for run, steps, at in written:
            seen = [t for n, t in shown.get(run, {}).items() if n >= steps]
            lags.append((min(seen) if seen else float("inf")) - at)
        cpu_s, wall_s = cpu_seconds(operator.pid) - cpu0, time.monotonic() - wall0
        memory = rss_kib(operator.pid)
        events = core.list_namespaced_event(NS, field_selector="type=Warning").items
        warnings = Counter(e.reason for e in events)

        apply_ms = [(pod_seen[n] - applied[n]) * 1000 for n in names if n in pod_seen]
        result = {
            "benchmark": "operator_scale",
            "runs": args.runs,
            "apply_rate_per_s": args.rate,
            "apply_seconds": round(apply_seconds, 1),
            "apply_to_pod_p50_ms": round(statistics.median(apply_ms), 1),
            "apply_to_pod_p95_ms": round(pct(apply_ms, 0.95), 1),
            "apply_to_pod_max_ms": round(max(apply_ms), 1),
            "all_pods_created_s": round(all_pods_s, 1),
            "all_runs_running_s": round(all_running_s, 1),
            "rss_mib_peak": round(memory["VmHWM"] / 1024, 1),
            "rss_mib_end": round(memory["VmRSS"] / 1024, 1),
            "cpu_percent_of_core": round(100 * cpu_s / wall_s, 1),
            "status_lag_p50_ms": round(statistics.median(lags) * 1000, 1),
            "status_lag_p95_ms": round(pct(lags, 0.95) * 1000, 1),
            "status_lag_max_ms": round(max(lags) * 1000, 1),
            "status_lag_writes": len(lags),
            "moving_runs": len(moving),
            "store_requests_per_s_per_run": round(requests_in_window / window_s / args.runs, 3),
            "store_window_s": round(window_s, 1),
            "error_events": sum(warnings.values()),
            "error_event_reasons": dict(warnings),
            "cpus": os.cpu_count(),
        }
        print(
            f"{args.runs} AgentRuns applied at {args.rate:g}/s ({result['apply_seconds']} s): apply -> pod created "
            f"p50 {result['apply_to_pod_p50_ms']} ms, p95 {result['apply_to_pod_p95_ms']} ms, max {result['apply_to_pod_max_ms']} ms; "
            f"all pods {result['all_pods_created_s']} s after the first apply"
        )
        print(f"operator: RSS peak {result['rss_mib_peak']} MiB, CPU {result['cpu_percent_of_core']} % of a core over {wall_s:.0f} s")
        print(
            f"status lag over {len(lags)} writes of {len(moving)} moving runs: p50 {result['status_lag_p50_ms']} ms, "
            f"p95 {result['status_lag_p95_ms']} ms, max {result['status_lag_max_ms']} ms"
        )
        print(
            f"store requests: {result['store_requests_per_s_per_run']} per second per active run over {result['store_window_s']} s "
            f"({args.runs} running, {len(moving)} of them moving)"
        )
        print(f"error Events: {result['error_events']} {dict(warnings) or ''}")
        save("operator_scale", result)
        print(json.dumps(result))
        return 0
    finally:
        stop.set()
        if operator is not None and operator.poll() is None:
            os.killpg(operator.pid, signal.SIGTERM)
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(operator.pid, signal.SIGKILL)
        cp.stop()
        s3.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main())
