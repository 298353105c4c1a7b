"""Nothing the kubernetes executor creates can be pre-created or swapped, and a pod that cannot
start ends its run (real apiserver, the chart's kubernetes executor, no kubelet: the test plays
it and the scheduler by patching pod status).

Attacks, each by a user with only the RBAC rights named:
- eve (`create configmaps`, `get agentruns,agenttools`) pre-creates the request ConfigMap of a
  run not yet submitted (its name derives from the uid and the request, both of which she can
  read) with her own baseURL and an ownerReference to the run: the run fails with
  OwnedObjectConflict and a Warning Event, no pod is ever created, her server hears nothing.
- mallory (`create pods`, `get agentruns`) plants a pod labelled as the run's execution (attempt
  99, owned by the run, "exits 0"): it is not adopted, the operator runs its own attempt 1; a pod
  at the name of the next attempt fails the run with OwnedObjectConflict.
- eve, with `create serviceaccounts`, makes the runner ServiceAccount of a namespace where it is
  missing, with tokens mounted: runs there fail with OwnedObjectConflict.
- mallory pre-creates the pod of a run's GPU tool (its name derives from the uid), trudy
  (`create secrets`, `get agentruns`) the Secret of its token with a token she knows: either
  fails the run with OwnedObjectConflict before any agent pod exists; what they made is left.
Lifecycle: a pod that cannot start (Unschedulable, ImagePullBackOff, a missing store Secret) fails
the run after the start grace with the scheduler's/kubelet's message and releases the finalizer;
`spec.timeout` counts from the pod's creation, so a pod never started times out; AgentTools carry
no finalizer, and one is deleted with the operator gone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube import ControlPlane
from tether.api import AgentRunSpec, AgentToolSpec, read_spec
from tether.contract import ExecRequest
from tether.testing.fake_provider import FakeProvider
from tether_operator import execution_name

from .conftest import Operator, Release, condition, get, install_release, release_operator, wait_for

pytestmark = pytest.mark.kube

NS, NS_B, OTHER = "own-a", "own-b", "own-other"
RELEASE = Release("tether-own-system", "tether-own", (NS, NS_B), OTHER)
IMAGE = "registry.example/tether-runtime:test"
EVE, MALLORY, TRUDY = "tether-test-user", "tether-test-user-3", "tether-test-user-2"  # static-token users with no rights of their own
FINALIZER = "tether.dev/cleanup"
GRACE = 2


@pytest.fixture(scope="module")
def release(kube: ControlPlane, tether_release: Release) -> Release:
    install_release(kube, RELEASE, "--set", "store.s3.bucket=runs")
    for ns in (NS, NS_B):  # the victim's key, meant for Tether (the operator checks its label before anything is created)
        kube.kubectl("create", "secret", "generic", "victim-key", "-n", ns, "--from-literal=openai=sk-victim", check=False)
        kube.kubectl("label", "secret", "victim-key", "-n", ns, "tether.dev/usable=true", "--overwrite")
    return RELEASE


@pytest.fixture(scope="module")
def k8s_operator(kube: ControlPlane, release: Release, tmp_path_factory) -> Iterator[Operator]:
    op = release_operator(
        kube,
        release,
        tmp_path_factory.mktemp("own-operator"),
        TETHER_EXECUTOR="kubernetes",
        TETHER_RUNTIME_IMAGE=IMAGE,
        TETHER_RESYNC_SECONDS="1",
        TETHER_POD_START_GRACE_SECONDS=str(GRACE),
        TETHER_GPU_NODE_POOLS=json.dumps({"A100": {"nodeSelector": {"gpu": "a100"}}}),
    )
    yield op
    op.stop()


@pytest.fixture(scope="module")
def users(kube: ControlPlane, release: Release) -> dict[str, Path]:
    for ns in (NS, NS_B):
        kube.kubectl(
            "create", "role", "read-runs", "-n", ns, "--verb=get,list,watch", "--resource=agentruns.tether.dev,agenttools.tether.dev"
        )
        kube.kubectl("create", "role", "make-configmaps", "-n", ns, "--verb=create", "--resource=configmaps")
        kube.kubectl("create", "role", "make-pods", "-n", ns, "--verb=create", "--resource=pods")
        kube.kubectl("create", "rolebinding", "eve-reads", "-n", ns, "--role=read-runs", f"--user={EVE}")
        kube.kubectl("create", "rolebinding", "eve-configmaps", "-n", ns, "--role=make-configmaps", f"--user={EVE}")
        kube.kubectl("create", "rolebinding", "mallory-reads", "-n", ns, "--role=read-runs", f"--user={MALLORY}")
        kube.kubectl("create", "rolebinding", "mallory-pods", "-n", ns, "--role=make-pods", f"--user={MALLORY}")
        kube.kubectl("create", "role", "make-secrets", "-n", ns, "--verb=create", "--resource=secrets")
        kube.kubectl("create", "rolebinding", "trudy-reads", "-n", ns, "--role=read-runs", f"--user={TRUDY}")
        kube.kubectl("create", "rolebinding", "trudy-secrets", "-n", ns, "--role=make-secrets", f"--user={TRUDY}")
    kube.kubectl("create", "role", "make-accounts", "-n", NS_B, "--verb=create", "--resource=serviceaccounts")
    kube.kubectl("create", "rolebinding", "eve-accounts", "-n", NS_B, "--role=make-accounts", f"--user={EVE}")
    for user, verb, resource in ((EVE, "create", "configmaps"), (MALLORY, "create", "pods"), (EVE, "get", "agentruns.tether.dev")):
        assert kube.kubectl("auth", "can-i", verb, resource, "-n", NS, f"--as={user}", check=False).stdout.strip() == "yes"
    for user, verb, resource in ((EVE, "create", "pods"), (EVE, "delete", "configmaps"), (MALLORY, "create", "configmaps"),
                                 (TRUDY, "get", "secrets"), (TRUDY, "create", "pods")):  # fmt: skip
        assert kube.kubectl("auth", "can-i", verb, resource, "-n", NS, f"--as={user}", check=False).stdout.strip() == "no"
    return {user: kube.kubeconfig_for(user) for user in (EVE, MALLORY, TRUDY)}


@pytest.fixture(scope="module")
def attacker_server() -> Iterator[FakeProvider]:
    with FakeProvider({"conversations": [{"match": "hello", "turns": [{"text": "hi"}]}]}) as provider:
        yield provider


def apply(kube: ControlPlane, kind: str, name: str, spec: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    kube.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(doc))
    return get(kube, kind.lower(), ns, name)


def run_spec(**spec: Any) -> dict[str, Any]:
    model = {"name": "gpt-4.1", "apiKeySecretRef": {"name": "victim-key", "key": "openai"}}
    return {"framework": "openai", "model": model, "input": "hello", "retries": 2, **spec}


def as_user(kube: ControlPlane, users: dict[str, Path], user: str, doc: dict[str, Any], ns: str = NS) -> None:
    kube.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(doc), kubeconfig=users[user])


def uid_as(kube: ControlPlane, users: dict[str, Path], user: str, name: str, ns: str = NS) -> str:
    """What the attacker reads: the run's uid (its execution's name derives from it)."""
    return kube.kubectl("get", "agentrun", name, "-n", ns, "-o", "jsonpath={.metadata.uid}", kubeconfig=users[user]).stdout.strip()


def owner(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "name": name, "uid": uid, "controller": True}


def pods_of(kube: ControlPlane, uid: str, ns: str = NS) -> dict[str, dict[str, Any]]:
    selector = f"tether.dev/execution={execution_name(uid)}"
    items = json.loads(kube.kubectl("get", "pods", "-n", ns, "-l", selector, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p for p in items}


def kubelet(kube: ControlPlane, ns: str, pod: str, status: dict[str, Any]) -> None:
    kube.kubectl("patch", "pod", pod, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}))


def exited(code: int) -> dict[str, Any]:
    terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
    phase = "Succeeded" if code == 0 else "Failed"
    return {"phase": phase, "containerStatuses": [{"name": "runtime", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0,
                                                   "state": {"terminated": terminated}}]}  # fmt: skip


def finalizers(kube: ControlPlane, kind: str, name: str, ns: str = NS) -> list[str]:
    return get(kube, kind, ns, name)["metadata"].get("finalizers") or []


def warnings(kube: ControlPlane, name: str, ns: str = NS) -> dict[str, str]:
    out = kube.kubectl("get", "events", "-n", ns, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
    return {e["reason"]: e["message"] for e in json.loads(out)["items"] if e["type"] == "Warning"}


def wait_failed(kube: ControlPlane, name: str, ns: str = NS) -> dict[str, Any]:
    waited = kube.kubectl("wait", "-n", ns, "--for=condition=Stalled", "--timeout=30s", f"agentrun/{name}", check=False)
    run = get(kube, "agentrun", ns, name)
    assert waited.returncode == 0, f"{name} did not fail; its status: {json.dumps(run.get('status'), indent=1)}"
    return condition(run, "Failed")


def squat_request(kube: ControlPlane, users: dict[str, Path], run: str, base_url: str) -> tuple[str, str]:
    """Eve's squat: she reads the run and its tool (as anyone who may `get` them), builds the
    request the operator will write with `tether.api` (so she knows its ConfigMap's name, which
    ends in the request's hash), and creates that ConfigMap first, with her own baseURL and an
    ownerReference to the run. (uid, ConfigMap name)"""
    obj = json.loads(kube.kubectl("get", "agentrun", run, "-n", NS, "-o", "json", kubeconfig=users[EVE]).stdout)
    tools = {}
    for tool_name in obj["spec"].get("tools") or []:
        tool = json.loads(kube.kubectl("get", "agenttool", tool_name, "-n", NS, "-o", "json", kubeconfig=users[EVE]).stdout)
        tools[tool_name] = read_spec(AgentToolSpec, tool["spec"])
    uid = obj["metadata"]["uid"]
    request = ExecRequest(run_id=uid, namespace=NS, name=run, spec=read_spec(AgentRunSpec, obj["spec"]), tools=tools)
    text = json.dumps(request.wire())
    execution = execution_name(uid)
    name = f"{execution}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    evil = request.wire()
    evil["spec"]["model"]["baseURL"] = base_url
    for squatted in (name, execution):  # and the name operators before the hash used
        metadata = {"name": squatted, "labels": {"tether.dev/execution": execution}, "ownerReferences": [owner(run, uid)]}
        doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "immutable": True, "data": {"request.json": json.dumps(evil)}}
        as_user(kube, users, EVE, doc)
    return uid, name


def test_a_squatted_request_configmap_fails_the_run_and_is_never_mounted(
    kube: ControlPlane, k8s_operator: Operator, users: dict[str, Path], attacker_server: FakeProvider
) -> None:
    apply(kube, "AgentTool", "lookup", {"description": "Look an order up", "implementation": "shop.tools:lookup"})
    k8s_operator.stop()  # the run is not submitted yet (the operator restarting, or busy): eve is first
    try:
        apply(kube, "AgentRun", "victim", run_spec(tools=["lookup"]))
        uid, name = squat_request(kube, users, "victim", attacker_server.base_url("openai"))
    finally:
        k8s_operator.start()

    failed = wait_failed(kube, "victim")
    assert failed["reason"] == "OwnedObjectConflict", failed
    assert f"ConfigMap {NS}/{name} exists and is not the operator's" in failed["message"]
    assert "data.request.json" in failed["message"] and "it was not used" in failed["message"]
    assert f"ConfigMap {NS}/{name}" in warnings(kube, "victim").get("OwnedObjectConflict", "")
    assert not pods_of(kube, uid), "no pod ever mounted the squatted request"
    assert wait_for(lambda: not finalizers(kube, "agentrun", "victim"), what="finalizer released")
    assert attacker_server.ledger.snapshot() == [], "the attacker's server heard nothing"


def test_a_planted_pod_is_not_adopted(kube: ControlPlane, k8s_operator: Operator, users: dict[str, Path]) -> None:
    apply(kube, "AgentRun", "planted", run_spec(tools=["lookup-2"]))
    wait_for(lambda: condition(get(kube, "agentrun", NS, "planted"), "Accepted").get("reason") == "UnknownTool", what="UnknownTool")
    uid = uid_as(kube, users, MALLORY, "planted")
    execution = execution_name(uid)
    fake = f"{execution}-99"
    container = {"name": "runtime", "image": "attacker.example/fake:1", "command": ["true"]}
    labels = {"tether.dev/execution": execution, "tether.dev/attempt": "99"}
    as_user(kube, users, MALLORY, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": fake, "labels": labels,
            "ownerReferences": [owner("planted", uid)]}, "spec": {"containers": [container]}})  # fmt: skip
    kubelet(kube, NS, fake, exited(0))  # "the runtime finished"
    apply(kube, "AgentTool", "lookup-2", {"description": "Look an order up", "implementation": "shop.tools:lookup"})

    ours = wait_for(lambda: pods_of(kube, uid).get(f"{execution}-1"), what="the operator's own attempt 1")
    assert ours["spec"]["containers"][0]["image"] == IMAGE
    obj = get(kube, "agentrun", NS, "planted")
    assert obj["status"].get("phase") != "Succeeded" and obj["status"].get("attempts", 0) <= 1
    kubelet(kube, NS, ours["metadata"]["name"], exited(0))
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/planted")
    assert get(kube, "agentrun", NS, "planted")["status"]["attempts"] == 1
    assert sorted(pods_of(kube, uid)) == [f"{execution}-1", fake]


def test_a_pod_squatting_the_next_attempts_name_fails_the_run(kube: ControlPlane, k8s_operator: Operator, users: dict[str, Path]) -> None:
    apply(kube, "AgentRun", "squatted-pod", run_spec(tools=["lookup-3"]))
    wait_for(lambda: condition(get(kube, "agentrun", NS, "squatted-pod"), "Accepted").get("reason") == "UnknownTool", what="UnknownTool")
    uid = uid_as(kube, users, MALLORY, "squatted-pod")
    name = f"{execution_name(uid)}-1"
    # No execution label: a pod only at the name the operator will create.
    as_user(kube, users, MALLORY, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "ownerReferences": [owner("squatted-pod", uid)]},
            "spec": {"containers": [{"name": "runtime", "image": IMAGE}]}})  # fmt: skip
    kubelet(kube, NS, name, exited(0))
    apply(kube, "AgentTool", "lookup-3", {"description": "Look an order up", "implementation": "shop.tools:lookup"})
    failed = wait_failed(kube, "squatted-pod")
    assert failed["reason"] == "OwnedObjectConflict" and f"Pod {NS}/{name} exists and is not the operator's" in failed["message"]
    assert "OwnedObjectConflict" in warnings(kube, "squatted-pod")
    assert get(kube, "agentrun", NS, "squatted-pod")["status"]["phase"] == "Failed"
    assert wait_for(lambda: not finalizers(kube, "agentrun", "squatted-pod"), what="finalizer released")


def test_a_runner_account_that_mounts_tokens_is_refused(kube: ControlPlane, k8s_operator: Operator, users: dict[str, Path]) -> None:
    # In own-b the runner ServiceAccount is missing (as in a namespace a cluster-wide install
    # serves); eve makes one that mounts tokens before the operator does.
    kube.kubectl("delete", "serviceaccount", "tether-runner", "-n", NS_B)
    as_user(kube, users, EVE, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tether-runner"},
            "automountServiceAccountToken": True}, ns=NS_B)  # fmt: skip
    run = apply(kube, "AgentRun", "in-b", run_spec(), ns=NS_B)
    failed = wait_failed(kube, "in-b", ns=NS_B)
    assert failed["reason"] == "OwnedObjectConflict"
    assert (
        f"ServiceAccount {NS_B}/tether-runner exists and is not the operator's (it does not set automountServiceAccountToken: false)"
        in (failed["message"])
    )
    assert not pods_of(kube, run["metadata"]["uid"], ns=NS_B)


GPU_TOOL = {"description": "Embed on a GPU", "implementation": "shop.tools:embed", "resources": {"gpu": {"type": "A100", "count": 1}}}


def test_a_squatted_gpu_tool_pod_fails_the_run(kube: ControlPlane, k8s_operator: Operator, users: dict[str, Path]) -> None:
    apply(kube, "AgentRun", "tool-pod-squat", run_spec(tools=["embed-gpu-1"]))
    wait_for(lambda: condition(get(kube, "agentrun", NS, "tool-pod-squat"), "Accepted").get("reason") == "UnknownTool", what="UnknownTool")
    uid = uid_as(kube, users, MALLORY, "tool-pod-squat")
    execution = execution_name(uid)
    name = f"{execution}-1-tool-0"  # her own tool runner, where the agent would send its calls
    labels = {"tether.dev/execution": execution, "tether.dev/attempt": "1", "tether.dev/tool-pod": "0"}
    as_user(kube, users, MALLORY, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels,
            "ownerReferences": [owner("tool-pod-squat", uid)]}, "spec": {"containers": [{"name": "tool", "image": "attacker.example/tool:1"}]}})  # fmt: skip
    kubelet(kube, NS, name, {"phase": "Running", "podIP": "10.66.0.1", "conditions": [{"type": "Ready", "status": "True"}]})
    apply(kube, "AgentTool", "embed-gpu-1", GPU_TOOL)
    failed = wait_failed(kube, "tool-pod-squat")
    assert failed["reason"] == "OwnedObjectConflict" and f"Pod {NS}/{name} exists and is not the operator's" in failed["message"], failed
    assert "OwnedObjectConflict" in warnings(kube, "tool-pod-squat")
    assert list(pods_of(kube, uid)) == [name], "no agent pod was made to call her pod; hers is left alone"
    assert kube.kubectl("get", "secret", f"{execution}-1-tools", "-n", NS, check=False).returncode != 0, "no token made for her pod"
    assert wait_for(lambda: not finalizers(kube, "agentrun", "tool-pod-squat"), what="finalizer released")


def test_a_squatted_tool_token_secret_fails_the_run(kube: ControlPlane, k8s_operator: Operator, users: dict[str, Path]) -> None:
    apply(kube, "AgentRun", "token-squat", run_spec(tools=["embed-gpu-2"]))
    wait_for(lambda: condition(get(kube, "agentrun", NS, "token-squat"), "Accepted").get("reason") == "UnknownTool", what="UnknownTool")
    uid = uid_as(kube, users, TRUDY, "token-squat")
    execution = execution_name(uid)
    name = f"{execution}-1-tools"  # a token she knows would let her call the tool with its Secret
    labels = {"tether.dev/execution": execution, "tether.dev/attempt": "1"}
    as_user(kube, users, TRUDY, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": labels,
            "ownerReferences": [owner("token-squat", uid)]}, "immutable": True, "stringData": {"embed-gpu-2": "trudys-token"}})  # fmt: skip
    apply(kube, "AgentTool", "embed-gpu-2", GPU_TOOL)
    failed = wait_failed(kube, "token-squat")
    assert failed["reason"] == "OwnedObjectConflict" and f"Secret {NS}/{name} exists and is not the operator's" in failed["message"], failed
    assert "OwnedObjectConflict" in warnings(kube, "token-squat")
    assert wait_for(lambda: not pods_of(kube, uid), what="the tool pod made before deleted"), "and no agent pod"
    secret = json.loads(kube.kubectl("get", "secret", name, "-n", NS, "-o", "json").stdout)
    assert secret["data"] == {"embed-gpu-2": "dHJ1ZHlzLXRva2Vu"}, "hers, untouched (never read, never used)"
    assert wait_for(lambda: not finalizers(kube, "agentrun", "token-squat"), what="finalizer released")


def test_a_gpu_tool_pod_that_cannot_start_fails_the_run(kube: ControlPlane, k8s_operator: Operator) -> None:
    run = apply(kube, "AgentRun", "gpu-stuck", run_spec(tools=["embed-gpu-3"]))
    apply(kube, "AgentTool", "embed-gpu-3", GPU_TOOL)
    uid = run["metadata"]["uid"]
    name = f"{execution_name(uid)}-1-tool-0"
    wait_for(lambda: pods_of(kube, uid).get(name), what=f"tool pod {name}")
    kubelet(kube, NS, name, UNSCHEDULABLE)
    failed = wait_failed(kube, "gpu-stuck")
    assert failed["reason"] == "Unschedulable", failed
    assert f"tool pod {name} of AgentTool embed-gpu-3 did not start within {GRACE}s: Unschedulable: {NO_GPU}" in failed["message"]
    assert wait_for(lambda: not pods_of(kube, uid), what="the tool pod deleted"), "no agent pod either"
    assert kube.kubectl("get", "secret", f"{execution_name(uid)}-1-tools", "-n", NS, check=False).returncode != 0
    assert wait_for(lambda: not finalizers(kube, "agentrun", "gpu-stuck"), what="finalizer released")


def waiting(reason: str, message: str) -> dict[str, Any]:
    state = {"waiting": {"reason": reason, "message": message}}
    return {
        "phase": "Pending",
        "containerStatuses": [{"name": "runtime", "image": IMAGE, "imageID": "", "ready": False, "restartCount": 0, "state": state}],
    }


NO_GPU = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
UNSCHEDULABLE = {
    "phase": "Pending",
    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": NO_GPU}],
}
PULL = f'Back-off pulling image "{IMAGE}"'
NO_SECRET = 'secret "tether-store" not found'


@pytest.mark.parametrize(
    ("case", "status", "reason", "message"),
    [
        ("unschedulable", UNSCHEDULABLE, "Unschedulable", f"Unschedulable: {NO_GPU}"),
        ("bad-image", waiting("ImagePullBackOff", PULL), "ImagePullBackOff", f"ImagePullBackOff: {PULL}"),
        ("no-store-secret", waiting("CreateContainerConfigError", NO_SECRET), "MissingSecret", f"CreateContainerConfigError: {NO_SECRET}"),
    ],
)
def test_a_pod_that_cannot_start_fails_the_run(
    kube: ControlPlane, k8s_operator: Operator, case: str, status: dict[str, Any], reason: str, message: str
) -> None:
    run = apply(kube, "AgentRun", f"stuck-{case}", run_spec())
    uid = run["metadata"]["uid"]
    name = f"{execution_name(uid)}-1"
    wait_for(lambda: pods_of(kube, uid).get(name), what=f"pod {name}")
    wait_for(lambda: FINALIZER in finalizers(kube, "agentrun", f"stuck-{case}"), what="finalizer held while the pod exists")
    kubelet(kube, NS, name, status)
    failed = wait_failed(kube, f"stuck-{case}")
    assert failed["reason"] == reason, failed
    assert f"attempt 1: pod {name} did not start within {GRACE}s: {message}" in failed["message"]
    assert reason in warnings(kube, f"stuck-{case}")
    assert wait_for(lambda: not pods_of(kube, uid), what="the stuck pod deleted"), "it must not start later, unfollowed"
    assert get(kube, "agentrun", NS, f"stuck-{case}")["status"]["attempts"] == 1, "terminal: no second attempt"
    assert wait_for(lambda: not finalizers(kube, "agentrun", f"stuck-{case}"), what="finalizer released")


def test_the_timeout_counts_from_the_pods_creation(kube: ControlPlane, k8s_operator: Operator) -> None:
    # Never scheduled, no status at all: activeDeadlineSeconds would never start counting.
    run = apply(kube, "AgentRun", "never-starts", run_spec(timeout="3s", retries=0))
    uid = run["metadata"]["uid"]
    failed = wait_failed(kube, "never-starts")
    assert failed["reason"] == "RetriesExhausted"
    assert "attempt 1 timed out after 3s without starting; retries exhausted (0)" in failed["message"]
    assert not pods_of(kube, uid) and not finalizers(kube, "agentrun", "never-starts")


def test_agenttools_carry_no_finalizer_and_delete_without_the_operator(kube: ControlPlane, k8s_operator: Operator) -> None:
    apply(kube, "AgentTool", "plain-tool", {"description": "Look an order up", "implementation": "shop.tools:lookup"})
    kube.kubectl("wait", "-n", NS, "--for=condition=Ready", "--timeout=30s", "agenttool/plain-tool")
    # One from an older operator, which put kopf's finalizer on every tool: removed.
    apply(kube, "AgentTool", "old-tool", {"description": "Look an order up", "implementation": "shop.tools:lookup"})
    kube.kubectl(
        "patch", "agenttool", "old-tool", "-n", NS, "--type=merge", "-p", '{"metadata":{"finalizers":["tether.dev/abort-execution"]}}'
    )
    wait_for(lambda: not finalizers(kube, "agenttool", "old-tool"), what="an old finalizer removed")
    kube.kubectl("wait", "-n", NS, "--for=condition=Ready", "--timeout=30s", "agenttool/plain-tool")
    assert finalizers(kube, "agenttool", "plain-tool") == []
    k8s_operator.stop()  # as after `helm uninstall` with the CRDs kept
    try:
        for name in ("plain-tool", "old-tool"):
            kube.kubectl("delete", "agenttool", name, "-n", NS, "--timeout=15s")
    finally:
        k8s_operator.start()
    assert kube.kubectl("get", "agenttool", "plain-tool", "-n", NS, check=False).returncode != 0


def test_operator_never_crashed(k8s_operator: Operator) -> None:
    assert k8s_operator.alive()
    logs = k8s_operator.logs()
    assert "Traceback" not in logs, logs[-4000:]
