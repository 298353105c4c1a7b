"""Runs in real pods on the kind e2e cluster (tests/e2e/run.sh up + install first): issue 9's figures.

    KUBECONFIG=~/.cache/tether/e2e/kubeconfig PATH=<go-bins dir>:$PATH \
      python benchmarks/kind_pods.py [--runs 50] [--kills 5] [--standby]

For each of --runs weather runs (one at a time, so the fake provider's ledger tells whose call is
whose): apply → runner pod Running (the pod's container startedAt) and apply → first model call
(the fake provider's ledger time of the run's first request), p50/p95. For each of --kills research
runs: the runner pod is deleted once a tool finished; time from the deletion to the retry's first
replayed turn (the moment status.steps.modelReplayed first counts one, polled every 0.2 s: it
includes the operator's status interval) and to Succeeded; with --standby the same for runs with
spec.standby (the next attempt's pod waiting beside the first), interleaved with those without.
Apply times are the host's clock; pod and ledger times are the same machine's clock (kind nodes
are containers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results import save
from tests.e2e.cluster import NS, apply, delete_run, example, fake_provider, kubectl, ledger, pods, poll, status, wait_phase


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def one_run(i: int) -> tuple[float, float]:
    name = f"bench-{i}-{int(time.time() * 1000) % 10**8}"
    run, tools = example("openai", "weather", name)
    fake_provider("/_control/reset", "POST")
    applied = time.time()
    apply(run, tools)
    wait_phase(name, "Succeeded", timeout=300)
    pod = pods(name)[0]
    started = pod["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
    first_call = min(c["time"] for c in ledger())
    delete_run(name)
    return ts(started) - applied, first_call - applied


def one_kill(i: int, standby: bool = False) -> tuple[float, float]:
    name = f"bench-kill-{i}-{int(time.time() * 1000) % 10**8}"
    run, tools = example("openai", "research", name, **({"standby": True} if standby else {}))
    # Turn 2's answer held back a minute, so the deletion lands mid-run (as in tests/e2e).
    fake_provider("/_control/faults", "POST", [{"kind": "slow_first_byte:60", "after": 1}])
    apply(run, tools)
    poll("a finished tool", lambda: (status(name).get("steps") or {}).get("toolLive", 0) >= 1, 300, 0.2)
    first = next(p for p in pods(name) if p["metadata"]["labels"].get("tether.dev/attempt") == "1")["metadata"]["name"]
    killed = time.time()
    kubectl("delete", "pod", first, "-n", NS, "--wait=false")
    poll("a replayed turn", lambda: (status(name).get("steps") or {}).get("modelReplayed", 0) >= 1, 300, 0.2)
    replayed = time.time()
    wait_phase(name, "Succeeded", timeout=300)
    done = time.time()
    delete_run(name)
    return replayed - killed, done - killed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--standby", action="store_true", help="also --kills runs with spec.standby, interleaved")
    args = parser.parse_args()
    running, first_call = [], []
    for i in range(args.runs):
        r, f = one_run(i)
        running.append(r)
        first_call.append(f)
        print(f"run {i}: pod running {r:.2f}s, first model call {f:.2f}s", file=sys.stderr)
    to_replay, to_done, standby_replay, standby_done = [], [], [], []
    for i in range(args.kills):
        r, d = one_kill(i)
        to_replay.append(r)
        to_done.append(d)
        print(f"kill {i}: first replayed turn {r:.2f}s, succeeded {d:.2f}s after the pod kill", file=sys.stderr)
        if args.standby:
            r, d = one_kill(i, standby=True)
            standby_replay.append(r)
            standby_done.append(d)
            print(f"kill {i} (standby): first replayed turn {r:.2f}s, succeeded {d:.2f}s after the pod kill", file=sys.stderr)
    nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    figures = {
        "benchmark": "kind_pods",
        "runs": args.runs,
        "kills": args.kills,
        "nodes": len(nodes),
        "apply_to_pod_running_p50_s": pct(running, 0.5),
        "apply_to_pod_running_p95_s": pct(running, 0.95),
        "apply_to_first_model_call_p50_s": pct(first_call, 0.5),
        "apply_to_first_model_call_p95_s": pct(first_call, 0.95),
        "pod_kill_to_first_replayed_turn_p50_s": pct(to_replay, 0.5),
        "pod_kill_to_first_replayed_turn_max_s": round(max(to_replay), 2) if to_replay else None,
        "pod_kill_to_succeeded_p50_s": pct(to_done, 0.5),
        "apply_to_first_model_call_mean_s": round(statistics.mean(first_call), 2),
    }
    if standby_replay:
        figures["standby_pod_kill_to_first_replayed_turn_p50_s"] = pct(standby_replay, 0.5)
        figures["standby_pod_kill_to_first_replayed_turn_max_s"] = round(max(standby_replay), 2)
        figures["standby_pod_kill_to_succeeded_p50_s"] = pct(standby_done, 0.5)
    save("kind_pods", figures)
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
