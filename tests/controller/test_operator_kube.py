"""The operator on the real apiserver, with the chart's RBAC: semantic problems become precise
conditions and Events, missing things are picked up when they appear, and the operator survives
all of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.kube import ControlPlane

from .conftest import Operator, Release, condition, get, wait_for

pytestmark = pytest.mark.kube

NS = "op-a"


def run_manifest(name: str, **spec: Any) -> str:
    body = {
        "framework": "openai",
        # Nothing listens on port 9: should a run get as far as executing, it fails fast.
        "model": {"name": "gpt-4.1", "baseURL": "http://127.0.0.1:9/v1"},
        "input": "hello",
        "retries": 0,
        **spec,
    }
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": name}, "spec": body})


def create(kube: ControlPlane, doc: str, ns: str = NS) -> None:
    kube.kubectl("apply", "-n", ns, "-f", "-", input=doc)


def reason_of(kube: ControlPlane, name: str, type_: str, ns: str = NS) -> str:
    return condition(get(kube, "agentrun", ns, name), type_).get("reason", "")


def events_of(kube: ControlPlane, name: str, ns: str = NS) -> list[str]:
    out = kube.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
    return [e["reason"] for e in json.loads(out)["items"]]


def test_missing_secret_and_unknown_tool_are_conditions_then_picked_up(
    kube: ControlPlane, tether_release: Release, operator: Operator
) -> None:
    create(
        kube,
        run_manifest(
            "waits",
            tools=["lookup"],
            model={"name": "gpt-4.1", "baseURL": "http://127.0.0.1:9/v1", "apiKeySecretRef": {"name": "llm-key", "key": "OPENAI_API_KEY"}},
        ),
    )
    wait_for(lambda: reason_of(kube, "waits", "Accepted") == "UnknownTool", what="UnknownTool")
    obj = get(kube, "agentrun", NS, "waits")
    accepted = condition(obj, "Accepted")
    assert accepted["status"] == "False"
    assert "AgentTool op-a/lookup not found" in accepted["message"]
    assert "Secret op-a/llm-key (model API key) not found" in accepted["message"]
    # kstatus: still in progress (it may yet work), not stalled
    assert condition(obj, "Reconciling")["status"] == "True"
    assert condition(obj, "Stalled")["status"] == "False"
    assert obj["status"]["phase"] == "Pending" and obj["status"]["observedGeneration"] == 1

    kube.kubectl(
        "apply",
        "-n",
        NS,
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "tether.dev/v1alpha1",
                "kind": "AgentTool",
                "metadata": {"name": "lookup"},
                "spec": {"description": "Look an order up", "implementation": "shop.tools:lookup"},
            }
        ),
    )
    wait_for(lambda: reason_of(kube, "waits", "Accepted") == "MissingSecret", what="MissingSecret")
    kube.kubectl("create", "secret", "generic", "llm-key", "-n", NS, "--from-literal=WRONG_KEY=x")
    wait_for(lambda: reason_of(kube, "waits", "Accepted") == "SecretNotUsable", what="SecretNotUsable")
    assert "is not labelled tether.dev/usable=true" in condition(get(kube, "agentrun", NS, "waits"), "Accepted")["message"]
    kube.kubectl("label", "secret", "llm-key", "-n", NS, "tether.dev/usable=true")
    wait_for(lambda: reason_of(kube, "waits", "Accepted") == "MissingSecretKey", what="MissingSecretKey")
    assert "has no key 'OPENAI_API_KEY'" in condition(get(kube, "agentrun", NS, "waits"), "Accepted")["message"]
    kube.kubectl(
        "patch",
        "secret",
        "llm-key",
        "-n",
        NS,
        "--type=merge",
        "-p",
        json.dumps({"stringData": {"OPENAI_API_KEY": "sk-test-not-for-status"}}),
    )
    kube.kubectl("wait", "-n", NS, "--for=condition=Accepted", "--timeout=30s", "agentrun/waits")
    obj = wait_for(lambda: (o := get(kube, "agentrun", NS, "waits"))["status"].get("execution") and o, what="execution")
    assert obj["status"]["execution"]["executor"] == "local"
    assert obj["status"]["execution"]["name"].startswith("t")
    reasons = events_of(kube, "waits")
    assert {"UnknownTool", "MissingSecret", "SecretNotUsable", "MissingSecretKey", "Accepted", "Submitted"} <= set(reasons)
    # The key never shows up in the object, its Events or the operator's log.
    everything = kube.kubectl("get", "agentrun", "waits", "-n", NS, "-o", "json").stdout
    everything += kube.kubectl("get", "events", "-n", NS, "-o", "json").stdout + operator.logs()
    assert "sk-test-not-for-status" not in everything


def test_gpu_type_without_node_pool_is_a_terminal_condition(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    create(kube, run_manifest("h100", resources={"gpu": {"type": "H100", "count": 1}}))
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/h100")
    obj = get(kube, "agentrun", NS, "h100")
    assert obj["status"]["phase"] == "Failed"
    assert condition(obj, "Accepted")["reason"] == "InvalidResources"
    message = condition(obj, "Accepted")["message"]
    assert message.startswith("spec.resources.gpu.type of the run: 'H100' is not a GPU type this cluster offers"), message
    assert "gpuNodePools configures: A100" in message and message in condition(obj, "Failed")["message"]
    assert condition(obj, "Reconciling")["status"] == "False"  # never Stalled and Reconciling
    assert "InvalidResources" in events_of(kube, "h100")
    # A configured type passes the resource check, but the local (development) executor honours
    # no resources: refused, naming the field (the kubernetes executor's tests run it).
    create(
        kube, run_manifest("a100", resources={"gpu": {"type": "A100", "count": 1}}, image="ghcr.io/tether-dev/tether-runtime:1")
    )  # an allowed image
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/a100")
    accepted = condition(get(kube, "agentrun", NS, "a100"), "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "UnsupportedByExecutor")
    assert "the local executor does not honour spec.image, spec.resources" in accepted["message"]
    assert "UnsupportedByExecutor" in events_of(kube, "a100")


def test_agenttool_ready_follows_its_secrets(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    kube.kubectl(
        "apply",
        "-n",
        NS,
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "tether.dev/v1alpha1",
                "kind": "AgentTool",
                "metadata": {"name": "crm"},
                "spec": {
                    "description": "Talk to the CRM",
                    "implementation": "shop.tools:crm",
                    "env": [{"name": "CRM_TOKEN", "secretKeyRef": {"name": "crm", "key": "token"}}],
                },
            }
        ),
    )
    wait_for(lambda: condition(get(kube, "agenttool", NS, "crm"), "Reconciling").get("status") == "True", what="tool reconciling")
    tool = get(kube, "agenttool", NS, "crm")
    assert condition(tool, "Ready")["status"] == "False"
    assert condition(tool, "Ready")["reason"] == "MissingSecret"
    kube.kubectl("create", "secret", "generic", "crm", "-n", NS, "--from-literal=token=t0k3n-crm")
    kube.kubectl("label", "secret", "crm", "-n", NS, "tether.dev/usable=true")
    kube.kubectl("wait", "-n", NS, "--for=condition=Ready", "--timeout=30s", "agenttool/crm")
    assert get(kube, "agenttool", NS, "crm")["status"]["observedGeneration"] == 1
    assert "t0k3n-crm" not in kube.kubectl("get", "events", "-n", NS, "-o", "json").stdout


def test_deleting_a_waiting_run_is_not_blocked(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    create(kube, run_manifest("doomed", tools=["never-created"]))
    wait_for(lambda: reason_of(kube, "doomed", "Accepted") == "UnknownTool", what="UnknownTool")
    # nothing runs while it waits: no finalizer, so deleting it never needs the operator
    assert not get(kube, "agentrun", NS, "doomed")["metadata"].get("finalizers")
    kube.kubectl("delete", "agentrun", "doomed", "-n", NS, "--timeout=30s")
    assert kube.kubectl("get", "agentrun", "doomed", "-n", NS, check=False).returncode != 0


def test_unserved_namespace_is_left_alone(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    create(kube, run_manifest("elsewhere"), ns=tether_release.unserved)
    create(kube, run_manifest("here-too"))  # a served one, as a clock
    kube.kubectl("wait", "-n", NS, "--for=condition=Accepted", "--timeout=30s", "agentrun/here-too")
    obj = get(kube, "agentrun", tether_release.unserved, "elsewhere")
    assert obj["status"] == {"observedGeneration": -1}
    assert not obj["metadata"].get("finalizers")


def test_gitops_metadata_is_never_copied(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    doc = json.loads(run_manifest("tracked"))
    doc["metadata"]["labels"] = {"app.kubernetes.io/instance": "shop", "kustomize.toolkit.fluxcd.io/name": "shop"}
    doc["metadata"]["annotations"] = {"argocd.argoproj.io/tracking-id": "shop:tether.dev/AgentRun:op-a/tracked"}
    create(kube, json.dumps(doc))
    kube.kubectl("wait", "-n", NS, "--for=condition=Accepted", "--timeout=30s", "agentrun/tracked")
    # The local executor creates no Kubernetes objects; Events are the only thing the operator
    # writes, and they carry no labels or annotations of the run.
    events = json.loads(kube.kubectl("get", "events", "-n", NS, "--field-selector", "involvedObject.name=tracked", "-o", "json").stdout)[
        "items"
    ]
    assert events
    for e in events:
        meta = e["metadata"]
        assert not any(k.startswith(("app.kubernetes.io", "kustomize.", "argocd.")) for k in meta.get("labels") or {})
        assert not any(k.startswith("argocd.") for k in meta.get("annotations") or {})
    for kind in ("pods", "jobs.batch", "configmaps", "agentruns.tether.dev"):
        out = kube.kubectl("get", kind, "-n", NS, "-l", "app.kubernetes.io/instance=shop", "-o", "name").stdout
        assert out.strip() in ("", "agentrun.tether.dev/tracked"), (kind, out)


def test_operator_never_crashed(operator: Operator) -> None:
    assert operator.alive()
    logs = operator.logs()
    assert "Traceback" not in logs, logs[-4000:]


def test_metrics_endpoint(operator: Operator) -> None:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "tether_operator_submissions_total" in text
    assert "tether_operator_status_patches_total" in text
