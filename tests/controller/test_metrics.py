"""The operator's Prometheus metrics, scraped by a real Prometheus (Debian's package, a throwaway
server scraping every second) while AgentRuns of the OpenAI Agents SDK examples go through their
phases on the real apiserver (the local executor, the fake OpenAI provider):

    weather       succeeds
    research      killed mid-run (SIGKILL): retried, its next attempt replays the journal
    refund        waits for an approval, approved with `tether approve`, succeeds
    broken        its provider does not answer, retries 0: fails
    an AgentApproval while the run's store prefix cannot be read: a reconcile error

Then one PromQL query per metric (Prometheus' HTTP API) against what really happened: the fake
provider's ledger (live calls and tokens paid), the runs' status, the store. Every panel query of
the chart's Grafana dashboard must parse and return data over the test's time range.

A release of its own (`tether-metrics`, serving `metrics-a` only) keeps the figures exact: no
other module's runs are in its namespace.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import ADMIN_USER, ControlPlane
from tests.support.prometheus import Prometheus
from tether.contract import approvals_prefix
from tether.testing.fake_provider import FakeProvider
from tether_operator import execution_name

from .conftest import (
    CHART,
    LOOPBACK_PROVIDER,
    REPO,
    Operator,
    Release,
    condition,
    get,
    install_release,
    release_operator,
    uninstall_release,
    wait_for,
)

pytestmark = pytest.mark.kube

NS = "metrics-a"
RELEASE = Release("tether-metrics-system", "tether-metrics", (NS,), "op-other")
EXAMPLES = REPO / "examples" / "openai"
RUN = f'namespace="{NS}", framework="openai"'


def _agent_python() -> str:
    try:
        import agents  # noqa: F401

        import tether_openai  # noqa: F401

        return sys.executable
    except ImportError:
        out = subprocess.run([str(REPO / "scripts" / "env.sh"), "openai"], check=True, capture_output=True, text=True).stdout
        return f"{out.strip().splitlines()[-1]}/bin/python"


@dataclass
class Driven:
    """What happened, as the test saw it (beside what the metrics say)."""

    began: float
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # final objects, by name
    store: Path = Path()


@pytest.fixture(scope="module")
def release(kube: ControlPlane, tether_release: Release) -> Iterator[Release]:
    install_release(kube, RELEASE, "--set", "executor.kind=local", "--set", "providers.allowedBaseURLs={" + LOOPBACK_PROVIDER + "}")
    kube.kubectl("create", "secret", "generic", "openai", "-n", NS, "--from-literal=api-key=fake-key-metrics-0123456789", check=False)
    kube.kubectl("label", "secret", "openai", "-n", NS, "tether.dev/usable=true", "--overwrite")
    yield RELEASE
    uninstall_release(kube, RELEASE)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProvider]:
    conversations = []
    for name, match in (("weather", "weather in Paris"), ("research", "durable execution"), ("refund", "refund it")):
        for conversation in yaml.safe_load((EXAMPLES / f"{name}.script.yaml").read_text())["conversations"]:
            conversations.append({**conversation, "match": match})
    with FakeProvider({"conversations": conversations}, latency=0.2) as provider:
        yield provider


@pytest.fixture(scope="module")
def metrics_operator(kube: ControlPlane, release: Release, tmp_path_factory) -> Iterator[Operator]:
    op = release_operator(
        kube,
        release,
        tmp_path_factory.mktemp("metrics-operator"),
        TETHER_EXEC_PYTHON=_agent_python(),
        PYTHONPATH=str(EXAMPLES),
        TETHER_TOOL_MODULES="example_tools",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        TETHER_CONCURRENCY="4",
        # Status follows closely: research is killed once status shows its second turn, within
        # its 1.5 s tool (the operator counts an attempt's live turns from what it read of that
        # attempt's progress; a turn it never read is the next attempt's replay).
        TETHER_POLL_SECONDS="0.2",
        TETHER_MAX_POLL_SECONDS="0.5",
        TETHER_STATUS_INTERVAL_SECONDS="0.2",
    )
    yield op
    op.stop()


@pytest.fixture(scope="module")
def prometheus(metrics_operator: Operator, tmp_path_factory) -> Iterator[Prometheus]:
    with Prometheus(tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{metrics_operator.metrics_port}") as server:
        yield server


def apply_example(kube: ControlPlane, fake: FakeProvider, example: str, name: str, **spec: Any) -> None:
    docs = list(yaml.safe_load_all((EXAMPLES / f"{example}.yaml").read_text()))
    run = next(d for d in docs if d["kind"] == "AgentRun")
    run["metadata"]["name"] = name
    run["spec"]["model"]["baseURL"] = fake.base_url("openai")
    run["spec"].update(spec)
    kube.kubectl("apply", "-n", NS, "-f", "-", input="\n---\n".join(json.dumps(d) for d in docs))


def wait_condition(kube: ControlPlane, name: str, cond: str, timeout: int = 180) -> dict[str, Any]:
    proc = kube.kubectl(
        "wait", "-n", NS, f"--for=condition={cond}", f"--timeout={timeout}s", f"agentrun/{name}", check=False, timeout=timeout + 10
    )
    obj = get(kube, "agentrun", NS, name)
    assert proc.returncode == 0, f"{name} never {cond}: {json.dumps(obj.get('status'), indent=1)}"
    return obj


def status_of(kube: ControlPlane, name: str) -> dict[str, Any]:
    return get(kube, "agentrun", NS, name).get("status") or {}


@pytest.fixture(scope="module")
def driven(kube: ControlPlane, fake: FakeProvider, metrics_operator: Operator, prometheus: Prometheus) -> Driven:
    done = Driven(began=time.time(), store=Path(metrics_operator.store_url.removeprefix("file://")) / NS)
    # broken first, alone: the others' first observations are then changes of series Prometheus
    # has seen already (a series' first value is no increase to rate())
    broken = {
        "name": "gpt-4o-mini",
        "provider": "openai",
        "baseURL": "http://127.0.0.1:9/v1",
        "apiKeySecretRef": {"name": "openai", "key": "api-key"},
    }
    apply_example(kube, fake, "weather", "broken", model=broken, retries=0)
    done.runs["broken"] = wait_condition(kube, "broken", "Failed")
    prometheus.scraped_after(time.time())
    apply_example(kube, fake, "weather", "weather")
    apply_example(kube, fake, "research", "research")
    apply_example(kube, fake, "refund", "refund")

    # research: killed once its second turn is in status (read by the operator), while its
    # read-source tool runs (1.5 s)
    wait_for(
        lambda: (status_of(kube, "research").get("steps") or {}).get("modelLive", 0) >= 2, timeout=120, what="research's 2nd turn read"
    )
    folder = metrics_operator.workdir / "executions" / execution_name(get(kube, "agentrun", NS, "research")["metadata"]["uid"])
    os.killpg(int((folder / "pid").read_text()), signal.SIGKILL)

    # refund: approved by a person, with `tether approve` (an AgentApproval)
    obj = wait_condition(kube, "refund", "AwaitingApproval")
    (pending,) = [a for a in obj["status"]["approvals"] if not a.get("decision")]
    time.sleep(1.5)  # a wait worth measuring
    env = {**os.environ, "KUBECONFIG": str(kube.kubeconfig)}
    approve = subprocess.run([sys.executable, "-m", "tether", "approve", f"{NS}/refund", pending["id"], "--yes"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert approve.returncode == 0, approve.stdout + approve.stderr

    for name in ("weather", "research", "refund"):
        done.runs[name] = wait_condition(kube, name, "Succeeded")

    # A reconcile error: an AgentApproval of `weather` while its approvals cannot be read from the
    # store (a file where the folder should be; root or not, reads fail with NotADirectoryError).
    blocked = done.store / approvals_prefix(done.runs["weather"]["metadata"]["uid"]).rstrip("/")
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("not a folder")
    approval = {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentApproval",
        "metadata": {"name": "unreadable"},
        "spec": {"run": "weather", "approvalId": "0123456789abcdef", "decision": "approve", "decidedBy": ADMIN_USER},
    }
    kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(approval))
    wait_for(lambda: "StoreUnavailable" in metrics_operator.logs(), timeout=60, what="the approval handler's error")
    blocked.unlink()  # kopf's retry then refuses it: NoSuchRequest
    wait_for(
        lambda: condition(get(kube, "agentapproval", NS, "unreadable"), "Applied").get("reason") == "NoSuchRequest",
        timeout=60,
        what="NoSuchRequest",
    )
    prometheus.scraped_after(time.time())
    return done


def test_runs_by_phase_and_finished_by_reason(driven: Driven, prometheus: Prometheus) -> None:
    phases = Counter(o["status"]["phase"] for o in driven.runs.values())
    assert phases == {"Succeeded": 3, "Failed": 1}
    assert prometheus.query(f"sum by (phase) (tether_runs{{{RUN}}})") == {(("phase", p),): n for p, n in phases.items()}
    failed = condition(driven.runs["broken"], "Failed")["reason"]
    assert failed == "RetriesExhausted", failed
    assert prometheus.query(f"sum by (phase, reason) (tether_runs_finished_total{{{RUN}}})") == {
        (("phase", "Succeeded"), ("reason", "Succeeded")): 3,
        (("phase", "Failed"), ("reason", failed)): 1,
    }


def test_attempts_and_retries_by_reason(driven: Driven, prometheus: Prometheus) -> None:
    attempts = {name: o["status"]["attempts"] for name, o in driven.runs.items()}
    # weather 1; research killed once: 2; refund suspended for the approval, resumed: 2; broken 1
    assert attempts == {"weather": 1, "research": 2, "refund": 2, "broken": 1}
    assert prometheus.value(f"sum(tether_attempts_total{{{RUN}}})") == sum(attempts.values())
    # the kill is a retry; a suspension is not, nor the failure that exhausted broken's retries (0)
    assert prometheus.query(f"sum by (reason) (tether_retries_total{{{RUN}}}) > 0") == {(("reason", "Killed"),): 1}


def test_live_turns_and_tokens_are_what_the_provider_served_and_replays_are_counted_apart(
    driven: Driven, fake: FakeProvider, prometheus: Prometheus
) -> None:
    served = [e for e in fake.ledger.snapshot() if e.live and e.time >= driven.began]
    replayed = {name: o["status"]["steps"]["modelReplayed"] for name, o in driven.runs.items() if name != "broken"}
    assert replayed["research"] >= 2 and replayed["refund"] >= 1 and replayed["weather"] == 0
    turns = prometheus.query(f"sum by (mode) (tether_model_turns_total{{{RUN}}})")
    assert turns == {(("mode", "live"),): len(served), (("mode", "replayed"),): sum(replayed.values())}
    paid = sum(sum((e.usage or {}).values()) for e in served)
    tokens = prometheus.query(f"sum by (mode) (tether_tokens_total{{{RUN}}})")
    assert paid > 0 and tokens[(("mode", "live"),)] == paid
    assert tokens[(("mode", "replayed"),)] == sum(o["status"]["usage"]["replayedTokens"] for o in driven.runs.values())


def test_tool_calls_live_and_replayed(driven: Driven, prometheus: Prometheus) -> None:
    steps = {name: o["status"]["steps"] for name, o in driven.runs.items()}
    calls = prometheus.query(f"sum by (mode) (tether_tool_calls_total{{{RUN}}})")
    replayed = sum(s.get("toolReplayed", 0) for s in steps.values())
    assert calls[(("mode", "replayed"),)] == replayed >= 2  # research's search, refund's lookup
    # each replayed call ran live once, in an earlier attempt (research's read-source, killed
    # while it ran, was never recorded: it ran again, live, once recorded)
    assert calls[(("mode", "live"),)] == sum(s.get("toolLive", 0) for s in steps.values()) + replayed


def test_dollars_spent_and_saved_by_replay(driven: Driven, prometheus: Prometheus) -> None:
    usage = [o["status"]["usage"] for o in driven.runs.values()]
    cost = prometheus.query(f"sum by (mode) (tether_cost_usd_total{{{RUN}}})")
    spent, saved = sum(u["runLiveCostUSD"] for u in usage), sum(u["savedUSD"] for u in usage)
    assert spent > 0 and saved > 0
    assert cost[(("mode", "live"),)] == pytest.approx(spent, rel=1e-6)
    assert cost[(("mode", "replayed"),)] == pytest.approx(saved, rel=1e-6)


def _epoch(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_approval_wait(driven: Driven, prometheus: Prometheus) -> None:
    (decided,) = driven.runs["refund"]["status"]["approvals"]
    assert decided["decision"] == "approved"
    waited = _epoch(decided["decidedAt"]) - _epoch(decided["requestedAt"])  # whole seconds in status
    assert prometheus.query(f"sum by (decision) (tether_approval_wait_seconds_count{{{RUN}}}) > 0") == {(("decision", "approved"),): 1}
    measured = prometheus.value(f"sum(tether_approval_wait_seconds_sum{{{RUN}}})")
    assert measured >= 1.5 and abs(measured - waited) <= 1.0, (measured, waited)


def test_apply_to_pod_and_kill_to_first_replay(driven: Driven, prometheus: Prometheus) -> None:
    # every run started an attempt once (the local executor's "pod" is its process)
    starts = prometheus.query(f"sum by (executor) (tether_apply_to_pod_seconds_count{{{RUN}}})")
    assert starts == {(("executor", "local"),): 4}
    slowest = prometheus.value(f"histogram_quantile(1, sum by (le) (tether_apply_to_pod_seconds_bucket{{{RUN}}}))")
    assert 0 < slowest <= 60
    # one kill; the next attempt started after the executor's back-off (0.5 s) and replayed
    assert prometheus.value(f"sum(tether_kill_to_first_replay_seconds_count{{{RUN}}})") == 1
    assert 0.5 <= prometheus.value(f"sum(tether_kill_to_first_replay_seconds_sum{{{RUN}}})") <= 60


def test_reconcile_errors_and_store_requests(driven: Driven, prometheus: Prometheus) -> None:
    errors = prometheus.query("sum by (handler, error) (tether_operator_reconcile_errors_total)")
    assert set(errors) == {(("error", "StoreUnavailable"), ("handler", "agentapproval"))}, errors
    assert errors[(("error", "StoreUnavailable"), ("handler", "agentapproval"))] >= 1
    requests = prometheus.query("sum by (operation, result) (tether_operator_store_requests_total)")
    assert requests[(("operation", "get"), ("result", "ok"))] > 10  # progress and approvals on every look
    assert requests[(("operation", "get"), ("result", "error"))] == errors[(("error", "StoreUnavailable"), ("handler", "agentapproval"))]
    assert requests[(("operation", "create"), ("result", "ok"))] == 1  # the one decision recorded


def test_every_dashboard_query_parses_and_returns_data(driven: Driven, prometheus: Prometheus) -> None:
    dashboard = json.loads((CHART / "dashboards" / "tether.json").read_text())
    window = f"{int(time.time() - driven.began) + 60}s"  # the whole test, where Grafana would say $__range
    values = {"$namespace": NS, "$framework": "openai", "$__rate_interval": window, "$__range": window}
    targets = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    assert len(targets) >= 14
    for title, expr in targets:
        promql = re.sub(r"\$\w+", lambda m: values[m.group(0)], expr)
        series = prometheus.api("query_range", query=promql, start=driven.began, end=time.time(), step=1)["result"]
        numbers = [float(v) for s in series for _, v in s["values"]]
        assert any(math.isfinite(n) for n in numbers), f"panel {title!r}: {promql} returned no data"
    # the dashboard's variables (Grafana's label_values) list the namespace and framework
    assert NS in prometheus.api("label/namespace/values", **{"match[]": "tether_runs"})
    assert "openai" in prometheus.api("label/framework/values", **{"match[]": f'tether_runs{{namespace="{NS}"}}'})


def test_metrics_operator_never_crashed(driven: Driven, metrics_operator: Operator) -> None:
    assert metrics_operator.alive()
    # the only tracebacks are the approval handler's, retried by kopf, while the store was blocked
    lines = metrics_operator.logs().splitlines()
    ends = [
        next(line for line in lines[i + 1 :] if not line.startswith(" ")) for i, line in enumerate(lines) if line.startswith("Traceback")
    ]
    # (a chained traceback: the OSError, then StoreUnavailable)
    assert ends and all(end.startswith(("NotADirectoryError", "tether.errors.StoreUnavailable")) and "approvals/" in end for end in ends), (
        ends
    )
