"""Warm pods (chart value executor.warmPods) on the real apiserver: runner pods started before
their run, waiting at their imports, claimed by the next run of their shape (no kubelet: the tests
play it, as in test_kubernetes_executor.py).

Checked: a run's create starts a warm pod of its shape (what it looks like: no owner, no request,
no deadline, the request as a downward API file of an annotation, the runtime told to wait for it);
the next run of that shape claims it in one patch (labels, owner, request, deadline) instead of
creating a pod, and another warm pod follows; a run of another shape does not claim it; an ended
(idle) warm pod is deleted by the next run in the namespace; a pod made
to look like a warm pod by someone who may create pods is never claimed; a retry claims one too; a
restarted operator adopts a claimed pod (the chart's value: test_chart.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.kube import ControlPlane
from tether_operator import execution_name

from .conftest import Operator, Release, get, install_release, release_operator, uninstall_release, wait_for
from .test_kubernetes_executor import apply_run, kubelet, phase_of, pods_of

pytestmark = pytest.mark.kube

NS = "warm-a"
RELEASE = Release("tether-warm-system", "tether-warm", (NS,), "")
IMAGE = "registry.example/tether-runtime:test"
WARM = "tether.dev/warm"
REQUEST = "tether.dev/request"


@pytest.fixture(scope="module")
def warm_operator(kube: ControlPlane, tether_release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    install_release(kube, RELEASE, "--set", "store.s3.bucket=runs", "--set", "executor.warmPods.count=1")
    op = release_operator(
        kube,
        RELEASE,
        tmp_path_factory.mktemp("warm-operator"),
        TETHER_EXECUTOR="kubernetes",
        TETHER_RUNTIME_IMAGE=IMAGE,
        TETHER_RESYNC_SECONDS="1",
        TETHER_WARM_PODS="1",
    )
    yield op
    op.stop()
    uninstall_release(kube, RELEASE)


def warm_pods(kube: ControlPlane) -> dict[str, dict[str, Any]]:
    """The namespace's waiting warm pods, by name."""
    items = json.loads(kube.kubectl("get", "pods", "-n", NS, "-l", WARM, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def one_warm_pod(kube: ControlPlane, besides: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    found = wait_for(lambda: [p for n, p in warm_pods(kube).items() if n not in besides], what="a warm pod")
    assert len(found) == 1, sorted(warm_pods(kube))
    return found[0]


def pod_of(kube: ControlPlane, run: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The run's pod of `attempt`, whatever its name."""
    return wait_for(
        lambda: next(
            (p for p in pods_of(kube, run, NS).values() if p["metadata"]["labels"].get("tether.dev/attempt") == str(attempt)), None
        ),
        what=f"attempt {attempt}'s pod",
    )


def test_a_run_claims_the_warm_pod_its_shape_started(kube: ControlPlane, warm_operator: Operator) -> None:
    first = apply_run(kube, "warm-first", NS)
    execution = execution_name(first["metadata"]["uid"])
    own = pod_of(kube, first, 1)
    assert own["metadata"]["name"] == f"{execution}-1", "no warm pod waited: the run's pod is created"
    warm = one_warm_pod(kube)
    meta, spec = warm["metadata"], warm["spec"]
    assert meta["name"].startswith("tether-warm-") and meta["labels"]["tether.dev/execution"] == "", meta["labels"]
    assert "ownerReferences" not in meta and meta["annotations"][REQUEST] == "" and "activeDeadlineSeconds" not in spec
    request = {"path": "request.json", "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{REQUEST}']"}}
    assert {"name": "request", "downwardAPI": {"items": [request], "defaultMode": 420}} in spec["volumes"]
    runtime = spec["containers"][0]
    assert runtime["command"][-4:] == ["--warm-pod", "openai", "--idle-seconds", "600"]
    assert runtime["command"][:-4] == own["spec"]["containers"][0]["command"], "otherwise the run's own command"
    assert runtime["image"] == own["spec"]["containers"][0]["image"]
    assert not any(e["name"] == "TETHER_REQUEST_SHA256" for c in [runtime, *spec["initContainers"]] for e in c["env"])
    assert spec["initContainers"][0]["command"][-1] == "--wait-for-request", "the store proxy waits for the request too"
    kubelet(kube, own, "Succeeded", 0)
    kubelet(kube, warm, "Running")  # imports done, waiting for a claim

    second = apply_run(kube, "warm-second", NS, input="another question")
    claimed = pod_of(kube, second, 1)
    assert claimed["metadata"]["uid"] == meta["uid"], "the waiting warm pod runs the attempt: no pod created"
    assert list(pods_of(kube, second, NS)) == [meta["name"]]
    cmeta = claimed["metadata"]
    assert cmeta["labels"]["tether.dev/execution"] == execution_name(second["metadata"]["uid"]) and WARM not in cmeta["labels"]
    assert [(o["kind"], o["uid"], o["controller"]) for o in cmeta["ownerReferences"]] == [("AgentRun", second["metadata"]["uid"], True)]
    sent = json.loads(cmeta["annotations"][REQUEST])
    assert sent["runId"] == second["metadata"]["uid"] and sent["spec"]["input"] == "another question"
    assert 3600 <= claimed["spec"]["activeDeadlineSeconds"] <= 3600 + 60, "the timeout counts from the claim"
    following = one_warm_pod(kube, besides={meta["name"]})  # started for the next run
    assert following["metadata"]["labels"][WARM] == meta["labels"][WARM], "the same shape"
    kubelet(kube, claimed, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/warm-second")
    assert get(kube, "agentrun", NS, "warm-second")["status"]["attempts"] == 1


def test_a_run_of_another_shape_leaves_the_warm_pod_alone_and_ended_ones_are_deleted(kube: ControlPlane, warm_operator: Operator) -> None:
    waiting = one_warm_pod(kube)
    kubelet(kube, waiting, "Running")
    run = apply_run(kube, "warm-bigger", NS, resources={"cpu": "1"})
    own = pod_of(kube, run, 1)
    assert own["metadata"]["name"] == f"{execution_name(run['metadata']['uid'])}-1"
    assert waiting["metadata"]["name"] in warm_pods(kube), "not claimed: its pod would not be this run's"
    theirs = wait_for(lambda: [p for n, p in warm_pods(kube).items() if n != waiting["metadata"]["name"]], what="its shape's warm pod")
    assert [p["metadata"]["labels"][WARM] for p in theirs] != [waiting["metadata"]["labels"][WARM]], "a shape of its own"
    assert theirs[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    kubelet(kube, own, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/warm-bigger")
    # Nobody claims it: its idle time over, it exits 130. The next run in the namespace (another
    # shape's) deletes it: nothing owns a warm pod.
    kubelet(kube, theirs[0], "Failed", 130)
    other = apply_run(kube, "warm-sweeps", NS)
    claimed = pod_of(kube, other, 1)
    assert claimed["metadata"]["uid"] == waiting["metadata"]["uid"]
    wait_for(
        lambda: theirs[0]["metadata"]["name"] not in warm_pods(kube) and not _exists(kube, theirs[0]), what="the ended warm pod deleted"
    )
    kubelet(kube, claimed, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/warm-sweeps")


def _exists(kube: ControlPlane, pod: dict[str, Any]) -> bool:
    got = kube.kubectl("get", "pod", pod["metadata"]["name"], "-n", NS, "-o", "name", "--ignore-not-found")
    return bool(got.stdout.strip())


def test_a_pod_made_to_look_warm_is_never_claimed(kube: ControlPlane, warm_operator: Operator) -> None:
    """Someone who may create and delete pods (not AgentRuns) deletes the waiting warm pod and
    puts her own in its place, with its label: her image reading the request it would be given.
    The next run does not claim it (it is not what the operator starts): it gets its own pod, and
    her pod never receives a request."""
    user = "tether-test-user-3"  # a static-token user; this Role is in this module's namespace only
    kube.kubectl("create", "role", "pod-editor", "-n", NS, "--verb=get,list,create,delete", "--resource=pods", check=False)
    kube.kubectl("create", "rolebinding", "pod-editor", "-n", NS, "--role=pod-editor", f"--user={user}", check=False)
    as_user = kube.kubeconfig_for(user)
    waiting = one_warm_pod(kube)
    meta = waiting["metadata"]
    kube.kubectl("delete", "pod", meta["name"], "-n", NS, "--grace-period=0", "--force", kubeconfig=as_user)
    mine = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "tether-warm-mine", "labels": meta["labels"], "annotations": meta["annotations"]},
        "spec": {**waiting["spec"], "containers": [{**waiting["spec"]["containers"][0], "image": "registry.example/mine:1",
                                                    "command": ["sh", "-c", "cat /etc/tether/request/request.json"]}]},
    }  # fmt: skip
    for field in ("nodeName",):
        mine["spec"].pop(field, None)
    kube.kubectl("create", "-n", NS, "-f", "-", input=json.dumps(mine), kubeconfig=as_user)
    kubelet(kube, warm_pods(kube)["tether-warm-mine"], "Running")
    run = apply_run(kube, "warm-squatted", NS)
    own = pod_of(kube, run, 1)
    assert own["metadata"]["name"] == f"{execution_name(run['metadata']['uid'])}-1", "her pod was not claimed"
    hers = warm_pods(kube)["tether-warm-mine"]
    assert hers["metadata"]["annotations"][REQUEST] == "" and "ownerReferences" not in hers["metadata"]
    kubelet(kube, own, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/warm-squatted")
    kube.kubectl("delete", "pod", "tether-warm-mine", "-n", NS, "--grace-period=0", "--force")


def test_a_retry_claims_a_warm_pod_and_a_restarted_operator_adopts_it(kube: ControlPlane, warm_operator: Operator) -> None:
    run = apply_run(kube, "warm-retried", NS, retries=2)
    first = pod_of(kube, run, 1)
    kubelet(kube, first, "Running")
    warm = one_warm_pod(kube)
    kubelet(kube, warm, "Running")
    kubelet(kube, first, "Failed", 137)  # the attempt's pod died
    second = pod_of(kube, run, 2)
    assert second["metadata"]["uid"] == warm["metadata"]["uid"], "the retry runs in the waiting warm pod"
    warm_operator.kill()  # SIGKILL: the claimed pod keeps running
    warm_operator.start()
    wait_for(lambda: phase_of(kube, "warm-retried", NS) == "Running", what="Running")
    kubelet(kube, second, "Succeeded", 0)
    kube.kubectl("wait", "-n", NS, "--for=condition=Succeeded", "--timeout=30s", "agentrun/warm-retried")
    status = get(kube, "agentrun", NS, "warm-retried")["status"]
    assert status["attempts"] == 2, "adopted, not followed by a third attempt"
    assert len(pods_of(kube, run, NS)) == 2
