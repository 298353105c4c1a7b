"""CloudEvents of runs and approvals (operator/src/tether_operator/cloudevents.py) on the real
apiserver with the operator running (kubernetes executor, the test plays the kubelet), POSTed to a
real HTTP sink in the test: a run through Pending, Running, AwaitingApproval, a person's approval,
Running again and Succeeded; a sink that fails does not hold a run up and is retried; a sink that
is not an http(s) URL keeps the operator from starting."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.kube import ControlPlane, ensure_k8s_tools
from tether.contract import approvals_prefix
from tether.stores import open_store
from tether_operator.settings import Settings

from .conftest import Operator, Release, get, install_release, release_operator, uninstall_release, wait_for
from .test_chart import render
from .test_kubernetes_executor import IMAGE, kubelet, wait_pod

pytestmark = pytest.mark.kube

NS = "ce-a"
RELEASE = Release("tether-ce-system", "tether-ce", (NS,), "ce-other")


class Sink:
    """An HTTP server that records every POST; runs named in `failing` get 503."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []  # (Content-Type, event)
        self.failing: set[str] = set()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                sink.received.append((self.headers["Content-Type"], event))
                self.send_response(503 if event.get("subject") in sink.failing else 202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/events"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, run: str) -> list[dict[str, Any]]:
        return [e for _, e in self.received if e.get("subject") == run]


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.server.shutdown()


@pytest.fixture(scope="module")
def ce_operator(kube: ControlPlane, tether_release: Release, sink: Sink, tmp_path_factory) -> Iterator[Operator]:
    install_release(kube, RELEASE, "--set", "store.s3.bucket=runs", "--set", f"cloudEvents.sink={sink.url}")
    deployment = json.loads(kube.kubectl("get", "deployment", "tether-ce", "-n", RELEASE.namespace, "-o", "json").stdout)
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    op = release_operator(
        kube,
        RELEASE,
        tmp_path_factory.mktemp("ce-operator"),
        TETHER_EXECUTOR="kubernetes",
        TETHER_RUNTIME_IMAGE=IMAGE,
        TETHER_RESYNC_SECONDS="1",
        TETHER_CLOUDEVENTS_SINK=env["TETHER_CLOUDEVENTS_SINK"],  # as the chart renders cloudEvents.sink
    )
    yield op
    op.stop()
    uninstall_release(kube, RELEASE)


def apply_run(kube: ControlPlane, name: str) -> dict[str, Any]:
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": name},
           "spec": {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello"}}  # fmt: skip
    kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(doc))
    return get(kube, "agentrun", NS, name)


def phase_of(kube: ControlPlane, name: str) -> str:
    return str((get(kube, "agentrun", NS, name).get("status") or {}).get("phase", ""))


def test_a_run_and_its_approval_as_cloudevents(kube: ControlPlane, ce_operator: Operator, sink: Sink) -> None:
    run = apply_run(kube, "asks")
    uid = run["metadata"]["uid"]
    first = wait_pod(kube, run, 1, ns=NS)
    kubelet(kube, first, "Running")
    wait_for(lambda: phase_of(kube, "asks") == "Running", what="Running")
    aid = "a1b2c3d4e5f6" + "5d" * 8
    request = {"id": aid, "tool": "refund", "prompt": "Refund 20?", "arguments": {"amount": 20}, "requestedAt": time.time()}
    open_store(f"{ce_operator.store_url}/{NS}").create(f"{approvals_prefix(uid)}a1b2c3d4e5f6.request.json", json.dumps(request).encode())
    kubelet(kube, first, "Failed", 3)
    wait_for(lambda: phase_of(kube, "asks") == "AwaitingApproval", what="AwaitingApproval")
    decision = {"run": "asks", "approvalId": aid, "decision": "approve", "decidedBy": "tether-admin", "reason": "photos received"}
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentApproval", "metadata": {"name": "asks-yes"}, "spec": decision}
    kube.kubectl("create", "-n", NS, "-f", "-", input=json.dumps(doc))
    second = wait_pod(kube, run, 2, ns=NS)
    kubelet(kube, second, "Running")
    wait_for(
        lambda: (get(kube, "agentrun", NS, "asks")["status"] or {}).get("attempts") == 2 and phase_of(kube, "asks") == "Running",
        what="attempt 2 Running",
    )
    kubelet(kube, second, "Succeeded", 0)
    wait_for(lambda: phase_of(kube, "asks") == "Succeeded", what="Succeeded")

    events = wait_for(lambda: (e := sink.of("asks")) and e[-1]["type"] == "dev.tether.agentrun.Succeeded" and e, what="the Succeeded event")
    types = [e["type"].removeprefix("dev.tether.") for e in events]
    assert types == [
        "agentrun.Pending",
        "agentrun.Running",
        "agentrun.AwaitingApproval",
        "approval.requested",
        "approval.decided",
        "agentrun.Running",
        "agentrun.Succeeded",
    ], types
    assert {content_type for content_type, e in sink.received if e.get("subject") == "asks"} == {"application/cloudevents+json"}
    assert all(e["specversion"] == "1.0" and e["source"] == f"/apis/tether.dev/v1alpha1/namespaces/{NS}/agentruns/asks" for e in events)
    assert len({e["id"] for e in events}) == len(events), "each event its own id"
    by_type = {e["type"]: e for e in events}
    waiting = by_type["dev.tether.agentrun.AwaitingApproval"]["data"]
    assert waiting["uid"] == uid and waiting["reason"] == "AwaitingApproval" and aid in waiting["message"]
    requested = by_type["dev.tether.approval.requested"]["data"]
    assert (requested["id"], requested["tool"], json.loads(requested["arguments"])) == (aid, "refund", {"amount": 20})
    decided = by_type["dev.tether.approval.decided"]["data"]
    assert (decided["decision"], decided["by"], decided["reason"]) == ("approved", "tether-admin", "photos received")
    done = by_type["dev.tether.agentrun.Succeeded"]
    assert done["id"] == f"{uid}/Succeeded/2" and done["data"]["attempts"] == 2 and done["data"]["completionTime"]


def test_a_failing_sink_holds_no_run_up_and_is_tried_three_times(kube: ControlPlane, ce_operator: Operator, sink: Sink) -> None:
    sink.failing.add("unheard")
    run = apply_run(kube, "unheard")
    pod = wait_pod(kube, run, 1, ns=NS)
    kubelet(kube, pod, "Succeeded", 0)
    started = time.monotonic()
    wait_for(lambda: phase_of(kube, "unheard") == "Succeeded", what="Succeeded")
    assert time.monotonic() - started < 10
    uid = run["metadata"]["uid"]
    tries = wait_for(
        lambda: (t := [e for e in sink.of("unheard") if e["id"] == f"{uid}/Succeeded/1"]) and len(t) == 3 and t, timeout=60, what="3 tries"
    )
    assert len(tries) == 3
    time.sleep(2)
    assert len([e for e in sink.of("unheard") if e["id"] == f"{uid}/Succeeded/1"]) == 3, "dropped after 3 tries"
    assert "not delivered to the sink: HTTP 503" in ce_operator.logs()


@pytest.mark.parametrize("url", ["ftp://events.example", "http://user:pw@events.example/", "events.example"])
def test_a_sink_that_is_not_an_http_url_is_refused_at_start(url: str) -> None:
    settings = Settings.from_env({"TETHER_NAMESPACES": "team-a", "TETHER_CLOUDEVENTS_SINK": url})
    assert settings.startup_error() == (
        f"TETHER_CLOUDEVENTS_SINK={url!r} (chart value cloudEvents.sink): expected an http or https URL without credentials"
    )
    refused = render(ensure_k8s_tools() / "helm", f"cloudEvents.sink={url}", check=False)
    assert f"at '/cloudEvents/sink': '{url}' does not match pattern" in refused, refused
    assert render(ensure_k8s_tools() / "helm", "cloudEvents.sink=https://broker.example/default")


def test_ce_operator_never_crashed(ce_operator: Operator) -> None:
    assert ce_operator.alive()
    assert "Traceback" not in ce_operator.logs()
