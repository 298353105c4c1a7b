"""Runs in real pods on the kind e2e cluster (tests/e2e/run.sh up + install first): issue 9's figures.

    KUBECONFIG=~/.cache/tether/e2e/kubeconfig PATH=<go-bins dir>:$PATH \
      python benchmarks/kind_pods.py [--runs 50] [--kills 5] [--standby] [--warm-pods]

For each of --runs weather runs (one at a time, so the fake provider's ledger tells whose call is
whose): apply → runner pod Running (the pod's container startedAt) and apply → first model call
(the fake provider's ledger time of the run's first request), p50/p95. For each of --kills research
runs: the runner pod is deleted once a tool finished; time from the deletion to the retry's first
replayed turn — in the pod (its step line's time in the pod's log, `kubectl logs --timestamps`)
and as status shows it (status.steps.modelReplayed first counting one, polled every 0.2 s: it adds
the operator's status interval, 1 s in the e2e install) — and to Succeeded; with --standby the
same for runs with spec.standby (the next attempt's pod waiting beside the first), interleaved
with those without. With --warm-pods, the same runs and kills again with the release's
executor.warmPods.count at 1 (a warm pod of the runs' shape waiting when each run is applied and
when each pod is deleted; its "pod running" figures are negative: the claimed pod ran before the
apply). Apply times are the host's clock; pod, log and ledger times are the same
machine's clock (kind nodes are containers).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results import save
from tests.e2e.cluster import (
    NS,
    apply,
    delete_run,
    example,
    fake_provider,
    kubectl,
    ledger,
    pods,
    poll,
    status,
    wait_phase,
    warm_pods,
    warm_waiting,
)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def one_run(i: int, warm: bool = False) -> tuple[float, float]:
    name = f"bench-{i}-{int(time.time() * 1000) % 10**8}"
    run, tools = example("openai", "weather", name)
    fake_provider("/_control/reset", "POST")
    if warm:
        poll("a warm pod waiting", warm_waiting, 300)
    applied = time.time()
    apply(run, tools)
    wait_phase(name, "Succeeded", timeout=300)
    pod = pods(name)[0]
    started = pod["status"]["containerStatuses"][0]["state"]["terminated"]["startedAt"]
    first_call = min(c["time"] for c in ledger())
    delete_run(name)
    return ts(started) - applied, first_call - applied


def one_kill(i: int, standby: bool = False, warm: bool = False) -> tuple[float, float, float]:
    """(deletion -> first replayed turn in the pod, -> as status shows it, -> Succeeded)."""
    name = f"bench-kill-{i}-{int(time.time() * 1000) % 10**8}"
    run, tools = example("openai", "research", name, **({"standby": True} if standby else {}))
    # Turn 2's answer held back a minute, so the deletion lands mid-run (as in tests/e2e).
    fake_provider("/_control/faults", "POST", [{"kind": "slow_first_byte:60", "after": 1}])
    apply(run, tools)
    poll("a finished tool", lambda: (status(name).get("steps") or {}).get("toolLive", 0) >= 1, 300, 0.2)
    first = next(p for p in pods(name) if p["metadata"]["labels"].get("tether.dev/attempt") == "1")["metadata"]["name"]
    if warm:  # the retry's warm pod (the one this run's claim started) waiting
        poll("a warm pod waiting", lambda: [p for p in warm_waiting() if p["metadata"]["name"] != first], 300)
    killed = time.time()
    kubectl("delete", "pod", first, "-n", NS, "--wait=false")
    poll("a replayed turn", lambda: (status(name).get("steps") or {}).get("modelReplayed", 0) >= 1, 300, 0.2)
    seen = time.time()
    wait_phase(name, "Succeeded", timeout=300)
    done = time.time()
    second = next(p for p in pods(name) if p["metadata"]["labels"].get("tether.dev/attempt") == "2")["metadata"]["name"]
    in_pod = replayed_in_log(kubectl("logs", "--timestamps", "-n", NS, second))
    delete_run(name)
    return in_pod - killed, seen - killed, done - killed


REPLAYED_TURN = re.compile(r"^(\S+) +step +\d+ +replayed +turn ")


def replayed_in_log(log: str) -> float:
    """When the pod printed its first replayed turn's step line (the log line's timestamp)."""
    for line in log.splitlines():
        if match := REPLAYED_TURN.match(line):
            stamp = re.sub(r"(\.\d{6})\d*", r"\1", match.group(1))  # nanoseconds: Python parses micro
            return ts(stamp)
    raise AssertionError(f"no replayed turn in the pod's log:\n{log}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--standby", action="store_true", help="also --kills runs with spec.standby, interleaved")
    parser.add_argument("--warm-pods", action="store_true", help="then the runs and kills again with executor.warmPods.count 1")
    args = parser.parse_args()
    nodes = json.loads(kubectl("get", "nodes", "-o", "json"))["items"]
    figures: dict[str, object] = {"benchmark": "kind_pods", "runs": args.runs, "kills": args.kills, "nodes": len(nodes)}
    figures |= measure(args.runs, args.kills, args.standby)
    if args.warm_pods:
        with warm_pods(1):
            one_run(-1)  # its create starts the shape's first warm pod
            figures |= {f"warm_{k}": v for k, v in measure(args.runs, args.kills, False, warm=True).items()}
    save("kind_pods", figures)
    print(json.dumps(figures, sort_keys=True))
    return 0


def measure(runs: int, kills: int, standby: bool, warm: bool = False) -> dict[str, object]:
    how = " (warm pods)" if warm else ""
    running, first_call = [], []
    for i in range(runs):
        r, f = one_run(i, warm)
        running.append(r)
        first_call.append(f)
        print(f"run {i}{how}: pod running {r:.2f}s, first model call {f:.2f}s", file=sys.stderr)
    replay: dict[bool, list[float]] = {False: [], True: []}
    seen: dict[bool, list[float]] = {False: [], True: []}
    done: dict[bool, list[float]] = {False: [], True: []}
    for i in range(kills):
        for with_standby in (False, True) if standby else (False,):
            r, s, d = one_kill(i, with_standby, warm)
            replay[with_standby].append(r)
            seen[with_standby].append(s)
            done[with_standby].append(d)
            what = " (standby)" if with_standby else how
            print(f"kill {i}{what}: first replayed turn {r:.2f}s in the pod, {s:.2f}s in status, succeeded {d:.2f}s after", file=sys.stderr)
    figures: dict[str, object] = {
        "apply_to_pod_running_p50_s": pct(running, 0.5),
        "apply_to_pod_running_p95_s": pct(running, 0.95),
        "apply_to_first_model_call_p50_s": pct(first_call, 0.5),
        "apply_to_first_model_call_p95_s": pct(first_call, 0.95),
        "apply_to_first_model_call_mean_s": round(statistics.mean(first_call), 2) if first_call else None,
    }
    for with_standby, prefix in ((False, ""), (True, "standby_")):
        if replay[with_standby]:
            figures[f"{prefix}pod_kill_to_first_replayed_turn_p50_s"] = pct(replay[with_standby], 0.5)
            figures[f"{prefix}pod_kill_to_first_replayed_turn_max_s"] = round(max(replay[with_standby]), 2)
            figures[f"{prefix}pod_kill_to_status_replayed_p50_s"] = pct(seen[with_standby], 0.5)
            figures[f"{prefix}pod_kill_to_succeeded_p50_s"] = pct(done[with_standby], 0.5)
    return figures


if __name__ == "__main__":
    sys.exit(main())
