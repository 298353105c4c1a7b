"""Chaos on the kind e2e cluster (issue 27, item 4): runs in real pods while the operator, runner
pods, the store, the apiserver or a node are taken away, each property reported pass/fail.

    KUBECONFIG=~/.cache/tether/e2e/kubeconfig PATH=<go-bins dir>:$PATH \
      python benchmarks/chaos_kind.py [--scenarios a,b,d,e,c] [--runs 50] [--operator-kills 6] \
        [--concurrency 6] [--deletions 100] [--frameworks "openai langgraph pydantic-ai"] [--store-runs 6] [--apiserver-runs 6] \
        [--node-runs 3] [--logs DIR]

Every scenario runs the research example (3 scripted turns, 2 tools of 1.5 s) of a framework and
watches the whole time, with `kubectl get -w` on the runner pods and the AgentRuns (a watch that
breaks, as it does while the apiserver restarts, is started again and re-lists):
- two live runner pods of one run at once (Pending or Running, not yet deleted, tool pods aside):
  an overlap; one whose older pod was already being deleted (a graceful deletion) is counted apart;
- a status going backwards: the phase (Pending < Running < Succeeded/Failed) or `attempts`
  decreasing, or a `status.steps` count decreasing within one attempt (they are the current
  attempt's counters: a decrease after a newer runner pod appeared is that attempt's first
  progress, counted apart as `steps_reset_by_new_attempt`); a replay divergence
  (`steps.firstDivergence`);
- model calls: the fake provider's ledger (reset first), calls answered in full (HTTP 200);
- tool side effects, as tests/e2e counts them: the `[tool] NAME(` line each example tool prints as
  it starts, in the runner pods' logs, here followed from each pod's start (`kubectl logs -f`: a
  deleted pod's log goes with it). The documented window: a call still running when its pod was
  killed (its start logged, its step line `step N live tool NAME` not) may run once more.

(a) `--runs` runs, `--concurrency` in flight at once (a run is applied as another ends); the
    operator pod killed `--operator-kills` times at random moments (alternately `kubectl delete
    --grace-period=0 --force` and SIGKILL of its process on its node), each once the operator is
    Ready again, `--kill-gap` s after the previous kill and once a uniform pick in its share of the
    runs have ended (kill i of k: between i/k and (i+1)/k of `--runs`), so that the kills spread over
    the whole span: every run Succeeded, no overlap, no status backwards, each scripted turn
    answered once (no runner pod was killed).
(b) runner pods deleted at random moments (uniform in the first `--kill-window` s of a pod's run,
    alternately forced and graceful, up to `--kills-per-run` per run, retries raised to match)
    until `--deletions` landed on runs not yet finished, `--concurrency` runs at a time, round robin
    over `--frameworks`: every run Succeeded, no tool re-run beyond the window, live model calls
    <= turns + deletions.
(c) the node running `--node-runs` runs stopped (`docker stop` of its kind node container): the
    runs tolerate the A100 worker's taint and are put there (the CPU worker cordoned while they
    start: the store and the fake provider live on the CPU worker, and the store is moto, in
    memory), with node.kubernetes.io/unreachable|not-ready tolerated for only `--evict-after` s so
    the pods are evicted soon after the node is NotReady; then `docker start` and run.sh's network
    set again (`run.sh up`). Passes when every run Succeeded on the other node.
(d) the S3 store unreachable for `--outage` s mid-run (its Service's selector pointed at no pod:
    the moto server keeps its memory, scaling it to 0 would lose every journal), `--store-runs`
    runs: every run Succeeded with the scripted answer, no replay divergence, and whether a status
    condition said why while it lasted (the conditions seen are listed).
(e) the apiserver restarted mid-run (`crictl stop` of kube-apiserver in the control-plane node;
    the kubelet starts it again), `--apiserver-runs` runs: every run Succeeded, no overlap, no
    status backwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.results import save
from tests.e2e.cluster import INFRA, NS, RELEASE, REPO, example, fake_provider, framework_image, kubectl, ledger, poll

PHASE_RANK = {None: -1, "Pending": 0, "Running": 1, "AwaitingApproval": 1, "Succeeded": 2, "Failed": 2}
LABEL = "chaos-scenario"  # on every AgentRun this script makes: `kubectl delete agentrun -l` cleans up
TOOL_START = re.compile(r"\[tool\] (\w+)\(")
TOOL_STEP = re.compile(r"step\s+\d+\s+live\s+tool\s+([\w-]+)")
#: Small requests, so that the runs fit on the one CPU worker at once (the default, 250m, fits ~6):
#: what is measured is what chaos does, not the scheduler's queue.
RESOURCES = {"cpu": "50m", "memory": "512Mi"}
OPERATOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"


def log(message: str) -> None:
    print(f"[chaos] {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def script_turns(framework: str) -> list[dict[str, Any]]:
    script = yaml.safe_load((REPO / "examples" / framework / "research.script.yaml").read_text())
    return list(script["conversations"][0]["turns"])


class Watch:
    """`kubectl get RESOURCE -w` in a thread, each event handed to ``on_event(type, object)``;
    started again whenever it ends (the apiserver restarted, a watch timed out)."""

    def __init__(self, resource: str, selector: str, on_event: Callable[[str, dict[str, Any]], None]):
        self.args = ["kubectl", "get", resource, "-n", NS, "-l", selector, "-w", "--output-watch-events", "-o", "json"]
        self.on_event, self.restarts, self.stopped = on_event, 0, threading.Event()
        self.proc: subprocess.Popen[str] | None = None
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> Watch:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self.proc:
            self.proc.kill()
        self.thread.join(10)

    def _loop(self) -> None:
        while not self.stopped.is_set():
            self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            chunk: list[str] = []
            assert self.proc.stdout
            for line in self.proc.stdout:
                # One event a line (compact JSON); indented JSON spans lines, each event from a "{".
                chunk = [line] if line.startswith("{") else [*chunk, line]
                try:
                    event = json.loads("".join(chunk))
                except ValueError:
                    continue
                chunk = []
                try:
                    self.on_event(event.get("type", ""), event.get("object") or {})
                except Exception as exc:  # one odd object must not end the watch
                    log(f"watch {self.args[2]}: {exc!r}")
            self.proc.wait()
            if not self.stopped.is_set():
                self.restarts += 1
                time.sleep(1)


class Observer:
    """What the watches saw: runner pods (overlaps, nodes, attempts) and AgentRuns (phase, steps,
    attempts, conditions; anything going backwards). With ``follow_logs`` each runner pod's
    runtime log is followed from its start."""

    def __init__(self, follow_logs: bool = False, keep: Path | None = None):
        self.lock = threading.Lock()
        self.pods: dict[str, dict[str, Any]] = {}  # name -> run, attempt, node, live, deleting, running
        self.runs: dict[str, dict[str, Any]] = {}  # name -> status
        self.regressions: list[str] = []
        self.resets: Counter[str] = Counter()  # run -> steps taken back by a newer attempt (by design)
        self.attempt_resets = 0  # their sum
        self.history: dict[str, list[tuple[float, Any, dict[str, Any]]]] = defaultdict(list)  # run -> (time, attempts, steps) seen
        self.overlaps: dict[tuple[str, ...], dict[str, Any]] = {}
        self.conditions: list[tuple[float, str, str, str, str, str]] = []  # time, run, type, status, reason, message
        self.seen_conditions: set[tuple[str, str, str, str, str]] = set()
        self.follow_logs = follow_logs
        self.logs: dict[str, list[str]] = defaultdict(list)
        self.followers: list[subprocess.Popen[str]] = []
        self.watches = [Watch("pods", "tether.dev/run,tether.dev/execution", self._pod), Watch("agentruns", LABEL, self._run)]
        # --logs: the operator's log followed into KEEP/operator-POD.log (a force-deleted pod's log
        # goes with it), and the runner pods' logs followed, for failures() to keep
        self.keep, self.operators = keep, set[str]()
        if keep:
            self.follow_logs = True
            keep.mkdir(parents=True, exist_ok=True)
            self.watches.append(Watch("pods", OPERATOR, self._operator))

    def __enter__(self) -> Observer:
        for w in self.watches:
            w.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for w in self.watches:
            w.stop()
        for p in self.followers:
            p.kill()

    @property
    def watch_restarts(self) -> int:
        return sum(w.restarts for w in self.watches)

    def _pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        if "tether.dev/tool-pod" in labels or (meta.get("annotations") or {}).get("tether.dev/go") == "":
            return  # a tool's pod, or a standby waiting: not an attempt running the agent
        name, run = meta["name"], labels.get("tether.dev/run", "")
        running = any("running" in (c.get("state") or {}) or "terminated" in (c.get("state") or {})
                      for c in st.get("containerStatuses") or [] if c.get("name") == "runtime")  # fmt: skip
        with self.lock:
            info = self.pods.setdefault(name, {"run": run, "attempt": int(labels.get("tether.dev/attempt", 0)), "first_seen": time.time()})
            info.update(node=spec.get("nodeName"), phase=st.get("phase"), deleting=bool(meta.get("deletionTimestamp")))
            info["live"] = kind != "DELETED" and st.get("phase") in (None, "Pending", "Running")
            info["gone"] = kind == "DELETED"
            start_log = running and not info.get("running")
            info["running"] = info.get("running") or running
            live = sorted((n for n, p in self.pods.items() if p["run"] == run and p["live"]), key=lambda n: self.pods[n]["attempt"])
            if len(live) > 1:
                key = tuple(live)
                if key not in self.overlaps:
                    older_deleting = any(self.pods[n]["deleting"] for n in live[:-1])
                    self.overlaps[key] = {"run": run, "pods": live, "at": time.time(), "older_being_deleted": older_deleting}
                    log(f"two live pods of {run}: {live} (older being deleted: {older_deleting})")
        if start_log and self.follow_logs:
            threading.Thread(target=self._follow, args=(name,), daemon=True).start()

    def _operator(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        with self.lock:
            if kind == "DELETED" or name in self.operators:
                return
            self.operators.add(name)
        threading.Thread(target=self._follow_operator, args=(name,), daemon=True).start()

    def _follow_operator(self, pod: str) -> None:
        """Followed again each time its container ends (a SIGKILL restarts it in the same pod),
        until the pod is gone: lines may repeat after a restart."""
        assert self.keep
        with (self.keep / f"operator-{pod}.log").open("a") as out:
            while not self.watches[0].stopped.is_set():
                proc = subprocess.Popen(["kubectl", "logs", "-f", "-n", NS, pod, "-c", "operator", "--timestamps"],
                                        stdout=out, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
                self.followers.append(proc)
                proc.wait()
                time.sleep(2)
                if subprocess.run(["kubectl", "get", "pod", "-n", NS, pod], capture_output=True).returncode != 0:
                    return
                out.write(f"--- {time.strftime('%H:%M:%S')} followed again\n")
                out.flush()

    def _follow(self, pod: str) -> None:
        proc = subprocess.Popen(
            ["kubectl", "logs", "-f", "-n", NS, pod, "-c", "runtime"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.followers.append(proc)
        assert proc.stdout
        for line in proc.stdout:
            self.logs[pod].append(line)

    def _run(self, kind: str, obj: dict[str, Any]) -> None:
        name, st = obj["metadata"]["name"], obj.get("status") or {}
        if kind == "DELETED":
            return
        now = time.time()
        with self.lock:
            old = self.runs.get(name)
            if old is not None:
                why = []
                if PHASE_RANK.get(st.get("phase"), -1) < PHASE_RANK.get(old.get("phase"), -1):
                    why.append(f"phase {old.get('phase')} -> {st.get('phase')}")
                if (st.get("attempts") or 0) < (old.get("attempts") or 0):
                    why.append(f"attempts {old.get('attempts')} -> {st.get('attempts')}")
                # status.steps are the current attempt's counters (a new attempt starts from 0 and
                # replays): each newer attempt (a runner pod, or status.attempts, whichever is seen
                # first) may take them back once, counted apart; any other decrease is backwards.
                # (Not "since the counters last changed": the old attempt's last progress may be
                # read after the newer pod was made, and then the newer attempt's first progress.)
                attempts = max(int(st.get("attempts") or 0), *(p["attempt"] for p in self.pods.values() if p["run"] == name), 1)
                decreased = [
                    f"steps.{key} {was} -> {(st.get('steps') or {}).get(key)}"
                    for key, was in (old.get("steps") or {}).items()
                    if isinstance(was, int)
                    and not isinstance(was, bool)
                    and not (isinstance(n := (st.get("steps") or {}).get(key), int) and n >= was)
                ]
                if decreased and self.resets[name] < attempts - 1:
                    self.resets[name] += 1
                    self.attempt_resets += 1
                elif decreased:
                    why += decreased
                if why:
                    self.regressions.append(f"{name}: {', '.join(why)}")
                    pods = [
                        (p["attempt"], round(p["first_seen"] % 1000, 1), p.get("deleting")) for p in self.pods.values() if p["run"] == name
                    ]
                    log(
                        f"status backwards: {name}: {', '.join(why)}; its status seen (time, attempts, steps): {self.history[name][-6:]}; pods (attempt, first seen, deleting): {sorted(pods)}"
                    )
            self.runs[name] = st
            self.history[name].append(
                (
                    round(now % 1000, 1),
                    st.get("attempts"),
                    {k: v for k, v in (st.get("steps") or {}).items() if k in ("modelLive", "toolLive", "modelReplayed")},
                )
            )
            for c in st.get("conditions") or []:
                key = (name, c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", "")[:300])
                if key not in self.seen_conditions:
                    self.seen_conditions.add(key)
                    self.conditions.append((now, *key))

    # -- reading what was seen
    def phase(self, run: str) -> str | None:
        with self.lock:
            return (self.runs.get(run) or {}).get("phase")

    def status(self, run: str) -> dict[str, Any]:
        with self.lock:
            copy: dict[str, Any] = json.loads(json.dumps(self.runs.get(run) or {}))
            return copy

    def run_pods(self, run: str) -> list[tuple[str, dict[str, Any]]]:
        with self.lock:
            return sorted(((n, dict(p)) for n, p in self.pods.items() if p["run"] == run), key=lambda np: np[1]["attempt"])

    def wait_terminal(self, runs: list[str], timeout: float) -> dict[str, str | None]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(self.phase(r) in ("Succeeded", "Failed") for r in runs):
            time.sleep(1)
        return {r: self.phase(r) for r in runs}

    def running_pod(self, run: str, after_attempt: int, timeout: float) -> tuple[str, int] | None:
        """The run's newest pod past ``after_attempt`` once its runtime container started; None if
        the run ended first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.phase(run) in ("Succeeded", "Failed"):
                return None
            for name, p in reversed(self.run_pods(run)):
                if p["attempt"] > after_attempt and p["running"] and p["live"] and not p["deleting"]:
                    return name, p["attempt"]
            time.sleep(0.2)
        return None

    def overlap_figures(self) -> tuple[int, int, list[dict[str, Any]]]:
        plain = [o for o in self.overlaps.values() if not o["older_being_deleted"]]
        return len(plain), len(self.overlaps) - len(plain), list(self.overlaps.values())[:10]


# -- the cluster
def manifest(framework: str, name: str, scenario: str, **spec: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run, tools = example(framework, "research", name, **{"resources": RESOURCES, **spec})
    run["metadata"]["labels"] = {LABEL: scenario}
    return run, tools


def scenario_runs(scenario: str, count: int, **spec: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """A scenario's start: the fake provider's ledger reset, then ``count`` research runs of
    OpenAI Agents labelled for ``scenario`` — their names, and the runs and tools to apply."""
    fake_provider("/_control/reset", "POST")
    names, items = [], []
    for i in range(count):
        name = f"chaos-{scenario}-{i}-{suffix()}"
        run, tools = manifest("openai", name, scenario, **spec)
        names.append(name)
        items += [*tools, run]
    return names, items


def apply_all(items: list[dict[str, Any]]) -> None:
    """Runs and tools in one `kubectl apply` (the provider key Secret first: any value works)."""
    secrets = {json.dumps(r["spec"]["model"]["apiKeySecretRef"], sort_keys=True) for r in items if r["kind"] == "AgentRun"}
    for ref in map(json.loads, secrets):
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": ref["name"], "namespace": NS, "labels": {"tether.dev/usable": "true"}},
                  "stringData": {ref["key"]: "fake-key-no-real-model"}}  # fmt: skip
        kubectl("apply", "-f", "-", input=json.dumps(secret))
    tools = {t["metadata"]["name"]: t for t in items if t["kind"] == "AgentTool"}
    runs = [r for r in items if r["kind"] == "AgentRun"]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [*tools.values(), *runs]}), timeout=300)


def cleanup(scenario: str) -> None:
    kubectl("delete", "agentrun", "-n", NS, "-l", f"{LABEL}={scenario}", "--wait=true", "--ignore-not-found", timeout=600, check=False)


def live_calls() -> int:
    return sum(1 for c in ledger() if c["status"] == 200)


def suffix() -> str:
    return f"{int(time.time() * 1000) % 10**7:07d}"


def operator_pods() -> list[dict[str, Any]]:
    items = json.loads(kubectl("get", "pods", "-n", NS, "-l", OPERATOR, "-o", "json"))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def operator_ready() -> str | None:
    """The name of a Ready operator pod (not being deleted), with its restart count."""
    for p in operator_pods():
        cond = {c["type"]: c["status"] for c in (p.get("status") or {}).get("conditions") or []}
        if cond.get("Ready") == "True":
            restarts = sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or [])
            return f"{p['metadata']['name']}#{restarts}"
    return None


def node_exec(node: str, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", "exec", node, *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} on {node}: {proc.stderr.strip()}")
    return str(proc.stdout)


def kill_operator(how: str) -> str:
    """Force-deletes the operator pod, or SIGKILLs its containers' processes on its node; returns
    what was killed."""
    [pod] = [p for p in operator_pods() if (p.get("status") or {}).get("phase") == "Running"][:1]
    name, node = str(pod["metadata"]["name"]), str(pod["spec"]["nodeName"])
    if how == "force-delete":
        kubectl("delete", "pod", name, "-n", NS, "--grace-period=0", "--force", "--wait=false")
        return name
    ids = node_exec(node, "crictl", "ps", "-q", "--state", "running", "--label", f"io.kubernetes.pod.name={name}").split()
    for cid in ids:
        pid = node_exec(node, "crictl", "inspect", "-o", "go-template", "--template", "{{.info.pid}}", cid).strip()
        node_exec(node, "kill", "-9", pid)
    return f"{name} ({len(ids)} container(s) SIGKILLed on {node})"


def workers() -> dict[str, str]:
    """Worker node names: {"cpu": ..., "a100": ...} (tests/e2e/kind-config.yaml's pools)."""
    nodes = json.loads(kubectl("get", "nodes", "-l", "tether.dev/e2e-pool", "-o", "json"))["items"]
    return {n["metadata"]["labels"]["tether.dev/e2e-pool"]: n["metadata"]["name"] for n in nodes}


def failures(obs: Observer, phases: dict[str, str | None]) -> dict[str, dict[str, Any]]:
    """Why each run that did not succeed ended as it did: its phase, the Stalled condition's
    message and the last lines of its last runner pod's log (read before the runs are deleted).
    With --logs, each such run's AgentRun, every runner pod's whole log and events go to
    KEEP/RUN.txt, and the namespace's events and the store's log to KEEP/."""
    out = {}
    if obs.keep and any(p != "Succeeded" for p in phases.values()):
        (obs.keep / "events.txt").write_text(kubectl("get", "events", "-n", NS, "-o", "wide", "--sort-by=.lastTimestamp", check=False))
        (obs.keep / "s3.log").write_text(kubectl("logs", "-n", INFRA, "-l", "app=s3", "--tail=-1", check=False, timeout=60))
    for run, phase in phases.items():
        if phase == "Succeeded":
            continue
        stalled = [
            c.get("message", "")[:300]
            for c in obs.status(run).get("conditions") or []
            if c.get("type") == "Stalled" and c.get("status") == "True"
        ]
        pods = [n for n, p in obs.run_pods(run) if not p.get("gone")]
        tail = kubectl("logs", "-n", NS, pods[-1], "-c", "runtime", "--tail=2", check=False)[-400:] if pods else ""
        out[run] = {"phase": phase, "stalled": stalled[:1], "log": tail.strip()}
        if obs.keep:
            keep_run(obs, run)
    return out


def keep_run(obs: Observer, run: str) -> None:
    assert obs.keep
    parts = [kubectl("get", "agentrun", run, "-n", NS, "-o", "yaml", check=False)]
    for pod, info in obs.run_pods(run):
        parts.append(f"===== pod {pod} {json.dumps({k: v for k, v in info.items() if k != 'run'})}")
        parts.append(kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={pod}", "-o", "wide", check=False))
        parts.append("".join(obs.logs.get(pod, [])) or kubectl("logs", "-n", NS, pod, "-c", "runtime", check=False))
    (obs.keep / f"{run}.txt").write_text("\n".join(parts))


def keep_dir(args: argparse.Namespace, scenario: str) -> Path | None:
    return Path(args.logs) / f"{scenario}-{time.strftime('%H%M%S')}" if args.logs else None


def verdict(properties: dict[str, bool]) -> dict[str, Any]:
    return {"properties": properties, "pass": all(properties.values())}


# -- the scenarios
def kill_thresholds(runs: int, kills: int) -> list[int]:
    """For each kill, how many runs must have ended first: one uniform pick in each of ``kills``
    equal shares of ``runs``, so that the kills spread over the whole span of the runs."""
    return [random.randint(i * runs // kills, max(i * runs // kills, (i + 1) * runs // kills - 1)) for i in range(kills)]


def scenario_a(args: argparse.Namespace) -> dict[str, Any]:
    """The operator killed at random moments while --runs runs run, --concurrency at a time."""
    names, items = scenario_runs("a", args.runs, resources={"cpu": "20m", "memory": "384Mi"})
    batches: list[list[dict[str, Any]]] = []  # each run with its tools, in order
    batch: list[dict[str, Any]] = []
    for item in items:
        batch.append(item)
        if item["kind"] == "AgentRun":
            batches, batch = [*batches, batch], []
    applied: list[str] = []
    fed_error: list[Exception] = []
    kills: list[dict[str, Any]] = []
    with Observer(keep=keep_dir(args, "a")) as obs:

        def ended() -> int:
            return sum(1 for n in applied if obs.phase(n) in ("Succeeded", "Failed"))

        def feed() -> None:  # keeps --concurrency runs in flight until every run was applied
            try:
                for run_items in batches:
                    while len(applied) - ended() >= args.concurrency:
                        time.sleep(0.5)
                    apply_all(run_items)
                    applied.append(run_items[-1]["metadata"]["name"])
            except Exception as exc:  # raised in the scenario's thread below
                fed_error.append(exc)

        started = time.time()
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        poll("a runner pod running", lambda: any(p["running"] for p in list(obs.pods.values())), 600)
        for i, threshold in enumerate(kill_thresholds(len(names), args.operator_kills)):
            time.sleep(random.uniform(args.kill_gap[0], args.kill_gap[1]))
            # the threshold reached with a run in flight (the next may be about to be applied)
            while not fed_error and ended() < len(names) and (ended() < threshold or len(applied) == ended()):
                time.sleep(0.5)
            active = len(applied) - ended()
            if not active:
                log(f"(a) every run ended before kill {i + 1}")
                break
            before = operator_ready()
            how = ("force-delete", "SIGKILL")[i % 2]
            what = kill_operator(how)
            at = time.time()
            back = poll("the operator Ready again", lambda: (r := operator_ready()) and r != before and r, 300, 0.5)
            kills.append(
                {
                    "how": how,
                    "killed": what,
                    "active_runs": active,
                    "runs_ended_before": threshold,
                    "at_s": round(at - started, 1),
                    "ready_again_s": round(time.time() - at, 1),
                }
            )
            log(
                f"(a) kill {i + 1}: {how} {what} with {active} runs active ({len(applied)} applied); Ready again ({back}) after {kills[-1]['ready_again_s']} s"
            )
        feeder.join(args.timeout)
        if fed_error:
            raise fed_error[0]
        phases = obs.wait_terminal(names, args.timeout)
        took = time.time() - started
        calls = live_calls()
        plain, deleting, overlaps = obs.overlap_figures()
        attempts = Counter(obs.status(n).get("attempts") for n in names)
        regressions, restarts, resets = list(obs.regressions), obs.watch_restarts, obs.attempt_resets
        why = failures(obs, phases)
    turns = len(script_turns("openai")) * len(names)
    succeeded = sum(1 for p in phases.values() if p == "Succeeded")
    cleanup("a")
    return {
        "runs": len(names),
        "concurrency": min(args.concurrency, len(names)),
        "operator_kills": len(kills),
        "kills": kills,
        "succeeded": succeeded,
        "not_succeeded": why,
        "runs_by_attempts": {str(k): v for k, v in sorted(attempts.items(), key=lambda kv: str(kv[0]))},
        "two_live_pods": plain,
        "two_live_pods_older_being_deleted": deleting,
        "overlaps": overlaps,
        "status_backwards": regressions[:20],
        "steps_reset_by_new_attempt": resets,
        "live_model_calls": calls,
        "scripted_turns": turns,
        "seconds": round(took, 1),
        "watch_restarts": restarts,
        **verdict({
            "every_run_succeeded": succeeded == len(names),
            "operator_killed_at_least_once": len(kills) >= 1,
            "never_two_live_pods": plain + deleting == 0,
            "no_status_backwards": not regressions,
            "each_turn_answered_once": calls == turns,
        }),
    }  # fmt: skip


class Budget:
    """Deletions left to make, taken one at a time by the run threads."""

    def __init__(self, total: int):
        self.left, self.lock = total, threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True

    def give_back(self) -> None:
        with self.lock:
            self.left += 1


def tool_effects(obs: Observer, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Tool starts per run and tool from the followed logs; a start is in the window when an
    earlier pod of the run, killed, had started that tool and not logged its step line."""
    starts_total = rerun_in_window = beyond = 0
    detail = []
    for run, kills in runs.items():
        killed = {k["pod"] for k in kills}
        starts: Counter[str] = Counter()
        window: Counter[str] = Counter()
        for pod, _ in obs.run_pods(run):
            lines = obs.logs.get(pod, [])
            started = Counter(m.group(1) for line in lines if (m := TOOL_START.search(line)))
            finished = Counter(m.group(1).replace("-", "_") for line in lines if (m := TOOL_STEP.search(line)))
            starts.update(started)
            if pod in killed:
                for tool, n in started.items():
                    window[tool] += max(0, n - finished[tool])
        for tool, n in starts.items():
            starts_total += n
            extra = max(0, n - 1)
            allowed = min(extra, window[tool])
            rerun_in_window += allowed
            beyond += extra - allowed
            if extra - allowed:
                detail.append({"run": run, "tool": tool, "starts": n, "in_window": window[tool]})
    return {
        "tool_starts": starts_total,
        "tool_reruns_in_window": rerun_in_window,
        "tool_reruns_beyond_window": beyond,
        "beyond": detail[:10],
    }


def scenario_b(args: argparse.Namespace) -> dict[str, Any]:
    """Runner pods deleted at random moments across frameworks until --deletions landed."""
    budget = Budget(args.deletions)
    kills: dict[str, list[dict[str, Any]]] = {}
    frameworks: dict[str, str] = {}
    lock = threading.Lock()

    def one(i: int, framework: str) -> None:
        name = f"chaos-b-{framework}-{i}-{suffix()}"
        run, tools = manifest(framework, name, "b", retries=args.kills_per_run + 3)
        with lock:
            kills[name], frameworks[name] = [], framework
        apply_all([*tools, run])
        attempt = 0
        while len(kills[name]) < args.kills_per_run:
            found = obs.running_pod(name, attempt, 600)
            if not found:
                break
            pod, attempt = found
            time.sleep(random.uniform(0, args.kill_window))
            with obs.lock:
                still = obs.pods[pod]["live"] and not obs.pods[pod]["deleting"] and obs.pods[pod]["phase"] == "Running"
            if obs.phase(name) in ("Succeeded", "Failed") or not still or not budget.take():
                break  # the run (or this attempt) ended first: no deletion to count
            with lock:
                forced = sum(len(k) for k in kills.values()) % 2 == 0  # alternately forced and graceful
            gone = kubectl(
                "delete", "pod", pod, "-n", NS, "--wait=false", *(["--grace-period=0", "--force"] if forced else []), check=False
            )
            if not gone.strip():
                budget.give_back()
                break
            with lock:
                kills[name].append({"pod": pod, "forced": forced, "at": time.time()})
        obs.wait_terminal([name], args.timeout)

    images = contextlib.ExitStack()
    with images:
        for fw in args.frameworks:
            log(f"(b) loading {fw}'s image")
            images.enter_context(framework_image(fw))
        fake_provider("/_control/reset", "POST")
        started = time.time()
        with Observer(follow_logs=True, keep=keep_dir(args, "b")) as obs, ThreadPoolExecutor(args.concurrency) as pool:
            futures: list[Any] = []
            i = 0
            while budget.left > 0 and time.time() - started < args.timeout * 1.5:
                active = sum(1 for f in futures if not f.done())
                if active < args.concurrency and i < args.deletions * 2:
                    futures.append(pool.submit(one, i, args.frameworks[i % len(args.frameworks)]))
                    i += 1
                else:
                    time.sleep(0.5)
                for f in futures:
                    if f.done() and (failed := f.exception()):
                        raise failed
            for f in futures:
                f.result()
            time.sleep(3)  # the last lines of the followed logs
            names = list(kills)
            for pod, info in list(obs.pods.items()):  # pods still there: their whole log
                if not info.get("gone"):
                    out = kubectl("logs", "-n", NS, pod, "-c", "runtime", check=False)
                    if out:
                        obs.logs[pod] = out.splitlines(keepends=True)
            effects = tool_effects(obs, kills)
            calls = live_calls()
            plain, deleting, overlaps = obs.overlap_figures()
            phases = {n: obs.phase(n) for n in names}
            regressions, resets = list(obs.regressions), obs.attempt_resets
            why = failures(obs, phases)
        cleanup("b")  # before the images go: each is removed once no container uses it
    took = time.time() - started
    deletions = sum(len(k) for k in kills.values())
    turns = sum(len(script_turns(frameworks[n])) for n in names)
    succeeded = sum(1 for p in phases.values() if p == "Succeeded")
    by_framework = {fw: {"runs": sum(1 for n in names if frameworks[n] == fw), "deletions": sum(len(kills[n]) for n in names if frameworks[n] == fw)}
                    for fw in args.frameworks}  # fmt: skip
    return {
        "runs": len(names),
        "concurrency": args.concurrency,
        "deletions": deletions,
        "forced": sum(1 for k in kills.values() for d in k if d["forced"]),
        "by_framework": by_framework,
        "succeeded": succeeded,
        "not_succeeded": why,
        **effects,
        "live_model_calls": calls,
        "scripted_turns": turns,
        "two_live_pods": plain,
        "two_live_pods_older_being_deleted": deleting,
        "overlaps": overlaps,
        "status_backwards": regressions[:20],
        "steps_reset_by_new_attempt": resets,
        "seconds": round(took, 1),
        **verdict({
            "deletions_landed": deletions >= args.deletions,
            "three_frameworks_or_more": len({frameworks[n] for n in names if kills[n]}) >= min(3, len(args.frameworks)),
            "every_run_succeeded": succeeded == len(names),
            "no_tool_rerun_beyond_window": effects["tool_reruns_beyond_window"] == 0,
            "live_calls_within_turns_plus_kills": calls <= turns + deletions,
            "no_status_backwards": not regressions,
        }),
    }  # fmt: skip


def block_store(blocked: bool) -> None:
    """The S3 server unreachable, or reachable again: its Service's selector pointed at no pod (new
    connections refused) and, on its node, its traffic dropped both ways (connections already open,
    e.g. boto3's pooled ones, outlive a selector change: their conntrack entries stay)."""
    selector = {"app": "s3-chaos-unreachable" if blocked else "s3"}
    kubectl("patch", "service", "s3", "-n", INFRA, "--type=merge", "-p", json.dumps({"spec": {"selector": selector}}))
    [pod] = json.loads(kubectl("get", "pods", "-n", INFRA, "-l", "app=s3", "-o", "json"))["items"]
    node, ip = pod["spec"]["nodeName"], pod["status"]["podIP"]
    for rule in (["-d", ip, "-p", "tcp", "--dport", "5000"], ["-s", ip, "-p", "tcp", "--sport", "5000"]):
        node_exec(node, "iptables", "-I" if blocked else "-D", "FORWARD", *rule, "-j", "DROP", check=blocked)


def mid_run(obs: Observer, names: list[str], delay: tuple[float, float]) -> None:
    """Returns at a random moment once a tool of one of the runs finished."""
    poll("a finished tool", lambda: any((obs.status(n).get("steps") or {}).get("toolLive", 0) >= 1 for n in names), 600, 0.3)
    time.sleep(random.uniform(*delay))


def outcome(obs: Observer, names: list[str], phases: dict[str, str | None]) -> dict[str, Any]:
    final = {n: obs.status(n) for n in names}
    want = script_turns("openai")[-1]["text"]
    return {
        "runs": len(names),
        "succeeded": sum(1 for p in phases.values() if p == "Succeeded"),
        "not_succeeded": failures(obs, phases),
        "right_answer": sum(1 for s in final.values() if want in ((s.get("result") or {}).get("output") or "")),
        "replay_divergences": sum(1 for s in final.values() if (s.get("steps") or {}).get("firstDivergence")),
        "attempts": dict(Counter(str(s.get("attempts")) for s in final.values())),
    }  # fmt: skip


def scenario_d(args: argparse.Namespace) -> dict[str, Any]:
    """The S3 store unreachable for --outage s mid-run."""
    names, items = scenario_runs("d", args.store_runs)
    with Observer(keep=keep_dir(args, "d")) as obs:
        apply_all(items)
        try:
            mid_run(obs, names, (0.0, 2.0))
            before = {n: (obs.status(n).get("steps") or {}).get("toolLive", 0) for n in names}
            log(f"(d) store unreachable for {args.outage} s (tools finished per run: {sorted(before.values())})")
            block_store(True)
            blocked = time.time()
            time.sleep(args.outage)
        finally:
            block_store(False)
        unblocked = time.time()
        log("(d) store reachable again")
        phases = obs.wait_terminal(names, args.timeout)
        answered_when_ended = outcome(obs, names, phases)["right_answer"]
        time.sleep(30)  # a result the operator could not read as the run ended: does it come later?
        during = [c for c in obs.conditions if blocked <= c[0] <= unblocked + 2]
        said = [
            c for c in during if c[2:4] != ("ProgressReadable", "True") and re.search(r"store|s3|progress", f"{c[2]} {c[4]} {c[5]}", re.I)
        ]
        result = outcome(obs, names, phases)
        calls, regressions, resets = live_calls(), list(obs.regressions), obs.attempt_resets
        calls_seen = ledger()
    turns = len(script_turns("openai")) * len(names)
    operator_log = kubectl("logs", "-n", NS, f"deploy/{RELEASE}", "--since=10m", check=False, timeout=60)
    cleanup("d")
    return {
        **result,
        "outage_s": round(unblocked - blocked, 1),
        "right_answer_as_runs_ended": answered_when_ended,
        # a model call needs the step before it journaled: calls while the store was away say it was not
        "model_calls_during_outage": sum(1 for c in calls_seen if blocked + 5 <= c["time"] <= unblocked),
        "conditions_during_outage": sorted({f"{c[2]}={c[3]} ({c[4]})" for c in during}),
        "conditions_saying_why": [f"{c[1]}: {c[2]}={c[3]} {c[4]}: {c[5]}" for c in said][:5],
        "operator_log_progress_unreadable_lines": operator_log.count("cannot read progress"),
        "live_model_calls": calls,
        "scripted_turns": turns,
        "status_backwards": regressions[:20],
        "steps_reset_by_new_attempt": resets,
        **verdict({
            "every_run_succeeded": result["succeeded"] == len(names),
            "right_answer_every_run": result["right_answer"] == len(names),
            "no_replay_divergence": result["replay_divergences"] == 0,
            "a_condition_said_why": bool(said),
            "no_status_backwards": not regressions,
        }),
    }  # fmt: skip


def apiserver_ready() -> bool:
    return subprocess.run(["kubectl", "get", "--raw", "/readyz"], capture_output=True, timeout=10).returncode == 0


def scenario_e(args: argparse.Namespace) -> dict[str, Any]:
    """The apiserver restarted mid-run."""
    names, items = scenario_runs("e", args.apiserver_runs)
    plane = json.loads(kubectl("get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o", "json"))["items"][0]["metadata"]["name"]
    with Observer(keep=keep_dir(args, "e")) as obs:
        apply_all(items)
        mid_run(obs, names, (0.0, 3.0))
        ids = node_exec(plane, "crictl", "ps", "-q", "--name", "kube-apiserver").split()
        stopped = time.time()
        for cid in ids:
            node_exec(plane, "crictl", "stop", cid)
        log(f"(e) kube-apiserver stopped ({len(ids)} container(s))")
        time.sleep(2)
        poll("the apiserver ready again", lambda: _quiet(apiserver_ready), 600, 1)
        down = time.time() - stopped
        log(f"(e) apiserver ready again after {down:.1f} s")
        phases = obs.wait_terminal(names, args.timeout)
        result = outcome(obs, names, phases)
        calls, regressions, resets = live_calls(), list(obs.regressions), obs.attempt_resets
        plain, deleting, overlaps = obs.overlap_figures()
    turns = len(script_turns("openai")) * len(names)
    cleanup("e")
    return {
        **result,
        "apiserver_down_s": round(down, 1),
        "live_model_calls": calls,
        "scripted_turns": turns,
        "two_live_pods": plain + deleting,
        "overlaps": overlaps,
        "status_backwards": regressions[:20],
        "steps_reset_by_new_attempt": resets,
        **verdict({
            "every_run_succeeded": result["succeeded"] == len(names),
            "right_answer_every_run": result["right_answer"] == len(names),
            "never_two_live_pods": plain + deleting == 0,
            "no_status_backwards": not regressions,
            "each_turn_answered_once": calls == turns,
        }),
    }  # fmt: skip


def _quiet(probe: Callable[[], bool]) -> bool:
    try:
        return probe()
    except Exception:
        return False


def scenario_c(args: argparse.Namespace) -> dict[str, Any]:
    """The node running the runs stopped mid-run, started again after they ended."""
    nodes = workers()
    cpu, a100 = nodes["cpu"], nodes["a100"]
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": args.evict_after},
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": args.evict_after},
    ]
    names, items = scenario_runs("c", args.node_runs, tolerations=tolerations)
    with Observer(keep=keep_dir(args, "c")) as obs:
        kubectl("cordon", cpu)
        try:
            apply_all(items)
            poll("every first pod on a node", lambda: all(any(p["node"] for _, p in obs.run_pods(n)) for n in names), 300)
        finally:
            kubectl("uncordon", cpu)
        first_nodes = {n: obs.run_pods(n)[0][1]["node"] for n in names}
        mid_run(obs, names, (0.0, 1.0))
        subprocess.run(["docker", "stop", a100], check=True, capture_output=True, timeout=120)
        stopped = time.time()
        log(f"(c) node {a100} stopped")
        try:
            phases = obs.wait_terminal(names, min(args.timeout, 300))
            ended = time.time() - stopped
            ended_while_stopped = all(p in ("Succeeded", "Failed") for p in phases.values())
        finally:
            subprocess.run(["docker", "start", a100], check=True, capture_output=True, timeout=120)
            log(f"(c) node {a100} started again; run.sh up sets its network again")
            subprocess.run([str(REPO / "tests/e2e/run.sh"), "up"], capture_output=True, timeout=600)
        if not ended_while_stopped:  # what happens once the node is back
            phases = obs.wait_terminal(names, 300)
            ended = time.time() - stopped
        result = outcome(obs, names, phases)
        last_nodes = {n: (obs.run_pods(n) or [("", {"node": None})])[-1][1]["node"] for n in names}
        plain, deleting, overlaps = obs.overlap_figures()
    cleanup("c")
    on_stopped = [n for n in names if first_nodes[n] == a100]
    return {
        **result,
        "stopped_node": a100,
        "first_attempt_on_stopped_node": len(on_stopped),
        "last_attempt_on_other_node": sum(1 for n in on_stopped if last_nodes[n] == cpu),
        "stop_to_all_ended_s": round(ended, 1),
        "ended_while_the_node_was_stopped": ended_while_stopped,
        "evict_after_s": args.evict_after,
        "two_live_pods": plain + deleting,
        **verdict({
            "runs_were_on_the_stopped_node": len(on_stopped) == len(names),
            "every_run_succeeded": result["succeeded"] == len(names),
            "resumed_on_the_other_node": ended_while_stopped and all(last_nodes[n] == cpu for n in on_stopped),
        }),
    }  # fmt: skip


SCENARIOS = {"a": scenario_a, "b": scenario_b, "c": scenario_c, "d": scenario_d, "e": scenario_e}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default="a,b,d,e,c", help="which, in this order (comma-separated)")
    parser.add_argument("--runs", type=int, default=50, help="(a) runs in all")
    parser.add_argument("--operator-kills", type=int, default=6, help="(a)")
    parser.add_argument("--kill-gap", type=float, nargs=2, default=(3.0, 20.0), help="(a) seconds between kills, uniform")
    parser.add_argument("--deletions", type=int, default=100, help="(b)")
    parser.add_argument("--frameworks", type=str.split, default=["openai", "langgraph", "pydantic-ai"], help="(b)")
    parser.add_argument("--concurrency", type=int, default=6, help="(a), (b) runs in flight at once")
    parser.add_argument("--kills-per-run", type=int, default=3, help="(b)")
    parser.add_argument("--kill-window", type=float, default=8.0, help="(b) seconds after a pod started")
    parser.add_argument("--store-runs", type=int, default=6, help="(d)")
    parser.add_argument("--outage", type=float, default=30.0, help="(d) seconds")
    parser.add_argument("--apiserver-runs", type=int, default=6, help="(e)")
    parser.add_argument("--node-runs", type=int, default=3, help="(c)")
    parser.add_argument("--evict-after", type=int, default=10, help="(c) tolerationSeconds of unreachable/not-ready")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a scenario's runs may take to end")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--logs", default=None, help="a directory for the operator's log and, per failed run, its pods' logs and events")
    parser.add_argument("--name", default="chaos_kind", help="results file benchmarks/results/NAME.json (chaos_kind*)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    random.seed(seed)
    figures: dict[str, Any] = {"benchmark": "chaos_kind", "seed": seed, "scenarios": ""}
    for key in args.scenarios.split(","):
        log(f"scenario ({key})")
        t0 = time.time()
        try:
            figures[key] = SCENARIOS[key](args)
        except Exception as exc:  # reported as failed, the next scenario still runs
            log(f"({key}) did not complete: {exc!r}")
            figures[key] = {"error": str(exc)[:2000], "pass": False, "properties": {"completed": False}}
            with contextlib.suppress(Exception):
                cleanup(key)
        log(
            f"({key}) {'PASS' if figures[key]['pass'] else 'FAIL'} in {time.time() - t0:.0f} s: {json.dumps(figures[key].get('properties'))}"
        )
        # saved after each scenario: what was measured stays if a later one hangs
        figures["scenarios"] = ",".join(k for k in args.scenarios.split(",") if k in figures)
        figures["all_pass"] = all(figures[k]["pass"] for k in figures["scenarios"].split(","))
        save(args.name, figures)
    print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
