"""Operator benchmark: 2,000 AgentRuns applied at 20/s with the kubernetes executor, or the Flyte
executor against the real Flyte backend (issue 27 item 3).

Starts its own etcd + kube-apiserver (tests/support/kube.py) and a moto S3 server (the store,
tests/support/s3.py), installs the CRDs, runs `python -m tether_operator` as a process with its
default intervals, then applies `--runs` AgentRuns at `--rate` per second. There is no kubelet:
this script plays one cheaply, reporting each runner pod Running (one `pods/status` patch) as
soon as it appears, and plays each run's runtime the same way: one progress record written to S3
when its pod runs (what the runtime writes at an attempt's start), then nothing (a run waiting
on its model). `--moving` of the runs take a step every 0.7-3 s after that for
`--moving-seconds`: the status lag is measured on them. The pods never end.

`--executor flyte`: the Flyte 2 backend (tests/support/flyte_backend.py: the binary built by
scripts/flyte-backend.sh, its own PostgreSQL and S3) on the same apiserver; each AgentRun is a
Flyte run whose task pod the backend makes (label `flyte.org/run`), reported Running the same way.

Printed:
- apply -> pod created: from sending the create request to the watch event of the runner pod
  (p50/p95/max over all runs), and when the last pod appeared after the first apply; apply ->
  the status naming the execution, and the pod reported Running -> the status saying Running
- the operator process's RSS (peak, VmHWM; children excluded) and CPU (user + system, % of one
  core) over the whole benchmark; the same CPU figure for the apiserver, etcd, the S3 server,
  the Flyte backend and this script, and how long each was runnable but waiting for a core
  (/proc schedstat): on a shared machine, where the cores went
- status lag: from a progress write to the AgentRun watch event whose status.steps shows it (or
  a later step), p50/p95/max over the moving runs' writes
- store requests per second per active run: the operator's `tether_operator_store_requests_total`
  over `--window` seconds once every run is running (the moving runs included)
- error Events: Warning Events in the namespace, by reason (0 expected)

    V=$(scripts/env.sh core); $V/bin/python benchmarks/operator_scale.py [--runs 2000] [--rate 20] [--moving 50]
        [--executor kubernetes|flyte] [--name operator_scale]

Prints the figures, then one JSON line; the results file is `--name` (default operator_scale,
operator_scale-flyte).
"""

from __future__ import annotations

import argparse
import contextlib
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
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.operator_submit import rss_kib  # noqa: E402
from benchmarks.results import machine_load, save  # noqa: E402
from tests.support.kube import free_port, start_control_plane  # noqa: E402
from tests.support.s3 import new_bucket, s3_server, set_aws_env  # noqa: E402
from tether.api import Steps  # noqa: E402
from tether.contract import RUN_LABEL, RUN_UID_LABEL, Progress  # noqa: E402
from tether.progress import write_progress  # noqa: E402
from tether.stores import open_store  # noqa: E402
from tether_operator import execution_name  # noqa: E402

NS = "bench"
IMAGE = "registry.example/tether-runtime:bench"
FLYTE_RUN_LABEL = "flyte.org/run"  # the Flyte backend's label on a run's pods
STEP_PAUSES = (0.7, 1.0, 1.5, 3.0, 0.7, 2.0, 1.0)  # a moving run's steps: turns and tool calls


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def waited_seconds(pid: int) -> float:
    """Seconds the process's threads spent runnable but waiting for a core (/proc/PID/task/*/schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def children_cpu() -> dict[str, tuple[float, float]]:
    """(CPU seconds, seconds waiting for a core) of this process and of each child process, by what
    they are: where the machine's cores went (the apiserver, etcd, the S3 server, the operator, this
    script, the Flyte backend; its PostgreSQL runs detached and is not counted)."""
    names = {"kube-apiserver": "apiserver", "etcd": "etcd", "moto.server": "s3", "tether_operator": "operator", "flyte": "flyte_backend"}
    out: dict[str, tuple[float, float]] = {"benchmark": (cpu_seconds(os.getpid()), waited_seconds(os.getpid()))}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            what = next((v for k, v in names.items() if k in cmdline), None)
            if ppid != os.getpid() or what is None:
                continue
            cpu, waited = out.get(what, (0.0, 0.0))
            out[what] = (cpu + cpu_seconds(int(proc.name)), waited + waited_seconds(int(proc.name)))
        except (OSError, ValueError):
            continue  # ended meanwhile
    return out


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
    parser.add_argument("--executor", choices=("kubernetes", "flyte"), default="kubernetes", help="the operator's executor")
    parser.add_argument("--name", help="results file (default operator_scale, operator_scale-flyte with --executor flyte)")
    args = parser.parse_args()
    flyte = args.executor == "flyte"
    name = args.name or ("operator_scale-flyte" if flyte else "operator_scale")

    import kubernetes

    load_at_start = machine_load()
    work = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    set_aws_env()
    s3 = s3_server()
    endpoint = s3.__enter__()
    cp = start_control_plane(work / "cp")
    operator = None
    stop = threading.Event()
    backend = contextlib.ExitStack()
    try:
        executor_env = {"TETHER_EXECUTOR": "kubernetes"}
        if flyte:  # the real Flyte 2 backend on this apiserver (its own PostgreSQL and S3)
            from tests.support.flyte_backend import flyte_backend

            fly = backend.enter_context(flyte_backend(cp, work / "flyte"))
            executor_env = {
                "TETHER_EXECUTOR": "flyte",
                "TETHER_FLYTE_ENDPOINT": fly.endpoint,
                "TETHER_FLYTE_INSECURE": "1",
                "TETHER_RUNNER_STORE_SECRET": "",  # the store's credentials are the pods' own here: no Flyte secrets to inject
            }
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
            **executor_env,
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
        cpu0, wall0, machine0 = cpu_seconds(operator.pid), time.monotonic(), children_cpu()

        kubernetes.config.load_kube_config(str(cp.kubeconfig))
        client = kubernetes.client.ApiClient()
        client.rest_client.pool_manager.connection_pool_kw["maxsize"] = 16
        custom = kubernetes.client.CustomObjectsApi(client)
        core = kubernetes.client.CoreV1Api(client)
        applied: dict[str, float] = {}
        pod_seen: dict[str, float] = {}
        uids: dict[str, str] = {}
        shown: dict[str, dict[int, float]] = {}  # run -> steps count -> first time status showed it
        submitted: dict[str, float] = {}  # run -> first time status named its execution
        running: dict[str, float] = {}  # run -> first time status said Running
        pod_running: dict[str, float] = {}  # run -> when the kubelet's Running patch was answered
        lock = threading.Condition()
        kubelet = ThreadPoolExecutor(4)

        by_execution: dict[str, str] = {}  # execution name (a Flyte run's name) -> AgentRun
        started: set[str] = set()  # uids of the pods reported Running

        def start_pod(pod: str, namespace: str, run: str) -> None:  # the kubelet: the pod runs; the runtime writes its first record
            for _ in range(10):
                try:
                    core.patch_namespaced_pod_status(pod, namespace, {"status": {"phase": "Running"}})
                    pod_running.setdefault(run, time.perf_counter())
                    write_progress(store, uids[run], progress(1))
                    return
                except kubernetes.client.ApiException as exc:
                    if exc.status == 404:  # deleted meanwhile (its maker makes another: started when it appears)
                        return
                    print(f"kubelet: {pod}: {exc}", file=sys.stderr)
                    time.sleep(1)
                except Exception as exc:  # a loaded apiserver may time out: try again
                    print(f"kubelet: {pod}: {exc}", file=sys.stderr)
                    time.sleep(1)

        def on_pod(event: dict[str, Any]) -> None:
            meta = event["object"]["metadata"]
            labels = meta.get("labels") or {}
            # The kubernetes executor's pods carry the run's name; the Flyte backend's, the Flyte run's.
            run = by_execution.get(labels.get(FLYTE_RUN_LABEL, "")) if flyte else labels.get(RUN_LABEL)
            if event["type"] != "ADDED" or not run or meta["uid"] in started:
                return
            with lock:  # apply -> pod counts a run's first pod; every pod is started (the Flyte backend may make one again)
                pod_seen.setdefault(run, time.perf_counter())
                started.add(meta["uid"])
                if not flyte:
                    uids.setdefault(run, labels.get(RUN_UID_LABEL, ""))
                lock.notify_all()
            kubelet.submit(start_pod, meta["name"], meta["namespace"], run)

        def on_run(event: dict[str, Any]) -> None:
            obj = event["object"]
            status, name, now = obj.get("status") or {}, obj["metadata"]["name"], time.perf_counter()
            live = (status.get("steps") or {}).get("modelLive")
            with lock:
                if status.get("execution"):
                    submitted.setdefault(name, now)
                if status.get("phase") == "Running":
                    running.setdefault(name, now)
                if isinstance(live, int):
                    shown.setdefault(name, {}).setdefault(live, now)
                lock.notify_all()

        def watching(listing: Any, handle: Any, *args: Any, **kwargs: Any) -> Any:
            def loop() -> None:  # a watch the apiserver ends is started again (what it lists again is seen already)
                while not stop.is_set():
                    try:
                        # Plain JSON events (no model objects): the benchmark's own watching stays cheap.
                        for event in kubernetes.watch.Watch().stream(listing, *args, **kwargs, timeout_seconds=300, deserialize=False):
                            if stop.is_set():
                                return
                            handle(event)
                    except Exception as exc:
                        if not stop.is_set():
                            print(f"watch: {exc}", file=sys.stderr)
                            time.sleep(0.5)

            return loop

        if flyte:  # the backend makes the pods in a namespace of its own (per project and domain)
            watch_pods = watching(core.list_pod_for_all_namespaces, on_pod, label_selector=FLYTE_RUN_LABEL)
        else:
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
            # cast: the client is typed in one environment (object) and untyped in another (Any).
            made = cast(
                dict[str, Any], custom.create_namespaced_custom_object("tether.dev", "v1alpha1", NS, "agentruns", manifest(names[i]))
            )
            with lock:
                uids.setdefault(names[i], made["metadata"]["uid"])
                by_execution[execution_name(uids[names[i]])] = names[i]

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
        cpu_s, wall_s, machine1 = cpu_seconds(operator.pid) - cpu0, time.monotonic() - wall0, children_cpu()
        cores = {k: round(100 * (v[0] - machine0.get(k, (0.0, 0.0))[0]) / wall_s, 1) for k, v in machine1.items()}
        waiting = {k: round(100 * (v[1] - machine0.get(k, (0.0, 0.0))[1]) / wall_s, 1) for k, v in machine1.items()}
        memory = rss_kib(operator.pid)
        events = core.list_namespaced_event(NS, field_selector="type=Warning").items
        warnings = Counter(e.reason for e in events)

        apply_ms = [(pod_seen[n] - applied[n]) * 1000 for n in names if n in pod_seen]
        submitted_ms = [(submitted[n] - applied[n]) * 1000 for n in names if n in submitted]
        running_ms = [(running[n] - pod_running[n]) * 1000 for n in names if n in running and n in pod_running]
        result = {
            "benchmark": name,
            "executor": args.executor,
            "runs": args.runs,
            "apply_rate_per_s": args.rate,
            "apply_seconds": round(apply_seconds, 1),
            "apply_to_pod_p50_ms": round(statistics.median(apply_ms), 1),
            "apply_to_pod_p95_ms": round(pct(apply_ms, 0.95), 1),
            "apply_to_pod_max_ms": round(max(apply_ms), 1),
            "all_pods_created_s": round(all_pods_s, 1),
            **(
                {}  # Flyte: status says Running as the backend's phase does, before its pod runs
                if flyte
                else {
                    "pod_running_to_status_p50_ms": round(statistics.median(running_ms), 1),
                    "pod_running_to_status_p95_ms": round(pct(running_ms, 0.95), 1),
                }
            ),
            "apply_to_submitted_p50_ms": round(statistics.median(submitted_ms), 1),
            "apply_to_submitted_p95_ms": round(pct(submitted_ms, 0.95), 1),
            "all_runs_running_s": round(all_running_s, 1),
            "rss_mib_peak": round(memory["VmHWM"] / 1024, 1),
            "rss_mib_end": round(memory["VmRSS"] / 1024, 1),
            "cpu_percent_of_core": round(100 * cpu_s / wall_s, 1),
            "cpu_percent_of_core_by_process": cores,
            "cpu_wait_percent_by_process": waiting,
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
            "load_at_start": load_at_start,  # the results file has the load at the end
        }
        print(
            f"{args.runs} AgentRuns applied at {args.rate:g}/s ({result['apply_seconds']} s): apply -> pod created "
            f"p50 {result['apply_to_pod_p50_ms']} ms, p95 {result['apply_to_pod_p95_ms']} ms, max {result['apply_to_pod_max_ms']} ms; "
            f"all pods {result['all_pods_created_s']} s after the first apply"
        )
        print(
            f"apply -> status names the execution p50 {result['apply_to_submitted_p50_ms']} ms, p95 {result['apply_to_submitted_p95_ms']} ms"
            + (
                ""
                if flyte
                else f"; pod Running -> status Running p50 {result['pod_running_to_status_p50_ms']} ms, p95 {result['pod_running_to_status_p95_ms']} ms"
            )
        )
        print(f"operator: RSS peak {result['rss_mib_peak']} MiB, CPU {result['cpu_percent_of_core']} % of a core over {wall_s:.0f} s")
        print(f"CPU, % of a core over {wall_s:.0f} s, by process: {cores} ({os.cpu_count()} cores; {load_at_start} at the start)")
        print(f"runnable but waiting for a core, % of the time: {waiting}")
        print(
            f"status lag over {len(lags)} writes of {len(moving)} moving runs: p50 {result['status_lag_p50_ms']} ms, "
            f"p95 {result['status_lag_p95_ms']} ms, max {result['status_lag_max_ms']} ms"
        )
        print(
            f"store requests: {result['store_requests_per_s_per_run']} per second per active run over {result['store_window_s']} s "
            f"({args.runs} running, {len(moving)} of them moving)"
        )
        print(f"error Events: {result['error_events']} {dict(warnings) or ''}")
        save(name, result)
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
        backend.close()
        cp.stop()
        s3.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main())
