"""GitOps (docs/gitops.md) on the real apiserver with the operator running (kubernetes executor;
the test plays the kubelet as test_kubernetes_executor.py does):

- the health Argo CD and Flux give AgentRuns in every phase and AgentTools ready or not, computed
  from the objects as the apiserver serves them: Argo CD's by the argocd-cm snippet of
  docs/gitops.md (the chart's files/argocd/*.lua) run in gopher-lua as Argo CD runs it, Flux's by
  kstatus (tests/support/health_tools.py);
- `spec.ttlSecondsAfterFinished`: a finished run is deleted that long after it finished (not
  before), also by an operator that was down meanwhile; runs without it are kept; the CRD schema
  refuses bad values;
- what Argo CD's `Replace=true` and `Force=true,Replace=true` and `generateName` do with an
  immutable run (kubectl replace, replace --force, create).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import kubernetes.config.kube_config
import pytest
import yaml

from tests.support.health_tools import assess
from tests.support.kube import ControlPlane
from tether.contract import approvals_prefix
from tether.stores import open_store
from tether_operator import kube as operator_kube

from .conftest import (
    CHART,
    REPO,
    TOOLBOX,
    Operator,
    Release,
    condition,
    get,
    install_release,
    release_operator,
    uninstall_release,
    wait_for,
)
from .test_kubernetes_executor import IMAGE, kubelet, wait_pod

pytestmark = pytest.mark.kube

NS, UNSERVED = "gitops-a", "gitops-unserved"
RELEASE = Release("tether-gitops-system", "tether-gitops", (NS,), UNSERVED)
GUIDE = REPO / "docs" / "gitops.md"


@pytest.fixture(scope="module")
def gitops_operator(kube: ControlPlane, tether_release: Release, tmp_path_factory) -> Iterator[Operator]:
    """A release of the chart (kubernetes executor, CRDs from the session release) serving NS,
    and its operator authenticated as the release's ServiceAccount."""
    install_release(kube, RELEASE, "--set", "store.s3.bucket=runs", "--set", "tools.allowedModules={shop}")
    op = release_operator(
        kube,
        RELEASE,
        tmp_path_factory.mktemp("gitops-operator"),
        PYTHONPATH=str(TOOLBOX),
        TETHER_EXECUTOR="kubernetes",
        TETHER_RUNTIME_IMAGE=IMAGE,
        TETHER_RESYNC_SECONDS="1",
        TETHER_TOOL_MODULES="shop",
    )
    yield op
    op.stop()
    uninstall_release(kube, RELEASE)


def apply(kube: ControlPlane, kind: str, name: str, spec: dict[str, Any], ns: str = NS, verb: str = "apply") -> subprocess.CompletedProcess:
    """`kubectl apply` (or create, replace) of a tether.dev object, not checked: the caller asserts."""
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    return kube.kubectl(verb, "-n", ns, "-f", "-", input=json.dumps(doc), check=False)


def run_spec(**spec: Any) -> dict[str, Any]:
    return {"framework": "openai", "model": {"name": "gpt-4.1"}, "input": "hello", **spec}


def phase_of(kube: ControlPlane, name: str, ns: str = NS) -> str:
    return str((get(kube, "agentrun", ns, name).get("status") or {}).get("phase", ""))


def exists(kube: ControlPlane, name: str, ns: str = NS) -> bool:
    return kube.kubectl("get", "agentrun", name, "-n", ns, check=False).returncode == 0


def argocd_cm_from_guide() -> dict[str, Any]:
    """The argocd-cm ConfigMap docs/gitops.md tells Argo CD users to apply."""
    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.S)
    (cm,) = [doc for block in blocks if (doc := yaml.safe_load(block)) and doc.get("metadata", {}).get("name") == "argocd-cm"]
    return dict(cm)


def test_the_guides_argocd_snippet_is_the_charts_health_checks() -> None:
    data = argocd_cm_from_guide()["data"]
    files = CHART / "files" / "argocd"
    assert data == {
        "resource.customizations.health.tether.dev_AgentRun": (files / "agentrun-health.lua").read_text(),
        "resource.customizations.health.tether.dev_AgentTool": (files / "agenttool-health.lua").read_text(),
    }


def test_every_phase_as_argocd_and_flux_see_it(kube: ControlPlane, gitops_operator: Operator) -> None:
    """Runs driven to each phase and tools ready or not, exported from the apiserver and judged by
    Argo CD's Lua engine with the guide's argocd-cm and by kstatus (Flux)."""
    # AgentTools: ready; waiting for a Secret (Reconciling); not allowed to be a tool (Stalled)
    assert apply(kube, "AgentTool", "lookup", {"description": "Look up an order", "implementation": "shop.tools:lookup"}).returncode == 0
    waits = {
        "description": "Talk to the CRM",
        "implementation": "shop.tools:crm",
        "env": [{"name": "T", "secretKeyRef": {"name": "crm", "key": "t"}}],
    }
    assert apply(kube, "AgentTool", "crm", waits).returncode == 0
    assert apply(kube, "AgentTool", "shell", {"description": "Run a command", "implementation": "os:system"}).returncode == 0
    # AgentRuns: one nobody has looked at yet, then one per phase
    assert apply(kube, "AgentRun", "fresh", run_spec(), ns=UNSERVED).returncode == 0
    assert apply(kube, "AgentRun", "pending", run_spec(tools=["not-there"])).returncode == 0
    for name in ("running", "asks", "done", "broke"):
        assert apply(kube, "AgentRun", name, run_spec()).returncode == 0
    pod = {name: wait_pod(kube, get(kube, "agentrun", NS, name), 1, ns=NS) for name in ("running", "asks", "done", "broke")}
    kubelet(kube, pod["running"], "Running")
    kubelet(kube, pod["asks"], "Running")
    uid = get(kube, "agentrun", NS, "asks")["metadata"]["uid"]
    approval_id = "a1b2c3d4e5f6" + "7e" * 8
    request = {"id": approval_id, "tool": "refund", "prompt": "Refund 20?", "arguments": {"amount": 20}, "requestedAt": time.time()}
    open_store(f"{gitops_operator.store_url}/{NS}").create(
        f"{approvals_prefix(uid)}a1b2c3d4e5f6.request.json", json.dumps(request).encode()
    )
    kubelet(kube, pod["asks"], "Failed", 3)
    kubelet(kube, pod["done"], "Succeeded", 0)
    kubelet(kube, pod["broke"], "Failed", 2)
    phases = {"pending": "Pending", "running": "Running", "asks": "AwaitingApproval", "done": "Succeeded", "broke": "Failed"}
    for name, phase in phases.items():
        wait_for(lambda n=name, p=phase: phase_of(kube, n) == p, what=f"{name} {phase}")
    wait_for(lambda: condition(get(kube, "agenttool", NS, "lookup"), "Ready").get("status") == "True", what="lookup Ready")
    wait_for(lambda: condition(get(kube, "agenttool", NS, "crm"), "Reconciling").get("status") == "True", what="crm Reconciling")
    wait_for(lambda: condition(get(kube, "agenttool", NS, "shell"), "Stalled").get("status") == "True", what="shell Stalled")

    exported = json.loads(kube.kubectl("get", "agentruns,agenttools", "-n", NS, "-o", "json").stdout)
    exported["items"].append(get(kube, "agentrun", UNSERVED, "fresh"))
    seen = assess(exported, argocd_cm_from_guide())
    for name, v in seen.items():  # the table, for `pytest -s`
        print(
            f"{v['kind']:9} {name:8} Argo CD {v['argocd']['status']:11} {v['argocd']['message'][:90]!r:94} kstatus {v['kstatus']['status']}"
        )
    verdicts = {name: (v["argocd"]["status"], v["kstatus"]["status"]) for name, v in seen.items()}
    assert verdicts == {
        "fresh": ("Progressing", "InProgress"),
        "pending": ("Progressing", "InProgress"),
        "running": ("Progressing", "InProgress"),
        "asks": ("Progressing", "InProgress"),
        "done": ("Healthy", "Current"),
        "broke": ("Degraded", "Failed"),
        "lookup": ("Healthy", "Current"),
        "crm": ("Progressing", "InProgress"),
        "shell": ("Degraded", "Failed"),
    }, seen
    argo = {name: v["argocd"]["message"] for name, v in seen.items()}
    assert argo["fresh"] == "waiting for the Tether operator"
    assert seen["fresh"]["kstatus"]["message"] == "AgentRun generation is 1, but latest observed generation is -1"
    assert argo["pending"].startswith("Pending (UnknownTool): waiting: ") and "not-there" in argo["pending"]
    assert argo["running"].startswith("Running: attempt 1")
    assert argo["asks"].startswith(f"AwaitingApproval: waiting for approval of {approval_id}")
    assert argo["done"] == "Succeeded: the agent finished"
    assert argo["broke"].startswith("Failed: ") and "exit code 2" in argo["broke"], argo["broke"]
    assert seen["broke"]["kstatus"]["message"] == argo["broke"].removeprefix("Failed: ")  # Stalled's message: the same words
    assert argo["lookup"].startswith("Valid: ")
    assert argo["crm"].startswith("MissingSecret: waiting: ") and "crm" in argo["crm"]
    assert argo["shell"].startswith("ToolNotAllowed: ")
    # Flux's message for a waiting run says what it waits for
    assert "not-there" in seen["pending"]["kstatus"]["message"]


def test_without_the_snippet_argocd_has_no_health_for_a_run(kube: ControlPlane, gitops_operator: Operator) -> None:
    """The checks are looked up by the snippet's keys alone: without them Argo CD has no health
    for the kind (and counts the run Healthy); kstatus needs no configuration."""
    assert apply(kube, "AgentRun", "no-checks", run_spec(tools=["not-there"])).returncode == 0
    seen = assess(get(kube, "agentrun", NS, "no-checks"), {"data": {}})["no-checks"]
    assert seen["argocd"]["status"] == "(none)"
    assert seen["kstatus"]["status"] == "InProgress"


# ------------------------------------------------------------------ ttlSecondsAfterFinished


def completion(kube: ControlPlane, name: str) -> float:
    done = get(kube, "agentrun", NS, name)["status"]["completionTime"]
    return datetime.fromisoformat(done.replace("Z", "+00:00")).timestamp()


def expired_events(kube: ControlPlane, name: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
    return [e for e in json.loads(out)["items"] if e["reason"] == "Expired"]


def test_a_finished_run_is_deleted_ttl_seconds_after_it_finished(kube: ControlPlane, gitops_operator: Operator) -> None:
    assert apply(kube, "AgentRun", "short-lived", run_spec(ttlSecondsAfterFinished=4)).returncode == 0
    assert apply(kube, "AgentRun", "kept", run_spec()).returncode == 0
    assert apply(kube, "AgentRun", "failed-at-once", run_spec(ttlSecondsAfterFinished=0)).returncode == 0
    for name, code in (("short-lived", 0), ("kept", 0), ("failed-at-once", 2)):
        kubelet(kube, wait_pod(kube, get(kube, "agentrun", NS, name), 1, ns=NS), "Succeeded" if code == 0 else "Failed", code)
    wait_for(lambda: phase_of(kube, "short-lived") == "Succeeded", what="short-lived Succeeded")
    finished = completion(kube, "short-lived")
    wait_for(lambda: not exists(kube, "failed-at-once"), timeout=15, what="a failed run with ttl 0 deleted")
    time.sleep(max(0.0, finished + 2 - time.time()))
    assert exists(kube, "short-lived"), "deleted before its ttl"
    wait_for(lambda: not exists(kube, "short-lived"), timeout=15, what="short-lived deleted")
    gone = time.time()
    assert gone >= finished + 4 - 1, "completionTime has whole seconds"
    (event,) = expired_events(kube, "short-lived")
    assert event["type"] == "Normal" and "spec.ttlSecondsAfterFinished is 4: deleted" in event["message"]
    assert phase_of(kube, "kept") == "Succeeded", "a run without ttlSecondsAfterFinished is kept"


def test_an_operator_that_was_down_deletes_what_expired_meanwhile(kube: ControlPlane, gitops_operator: Operator) -> None:
    assert apply(kube, "AgentRun", "expires-while-down", run_spec(ttlSecondsAfterFinished=5)).returncode == 0
    kubelet(kube, wait_pod(kube, get(kube, "agentrun", NS, "expires-while-down"), 1, ns=NS), "Succeeded", 0)
    wait_for(lambda: phase_of(kube, "expires-while-down") == "Succeeded", what="Succeeded")
    gitops_operator.stop()
    try:
        time.sleep(max(0.0, completion(kube, "expires-while-down") + 6 - time.time()))
        assert exists(kube, "expires-while-down"), "nobody else deletes runs"
    finally:
        gitops_operator.start()
    wait_for(lambda: not exists(kube, "expires-while-down"), timeout=15, what="expired run deleted after the restart")


def test_the_delete_names_the_runs_uid(kube: ControlPlane, gitops_operator: Operator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's delete of an expired run (kube.delete with the uid, as the operator's
    ServiceAccount) leaves a run made again under the same name alone."""
    assert apply(kube, "AgentRun", "reborn", run_spec(tools=["not-there"])).returncode == 0
    old = get(kube, "agentrun", NS, "reborn")["metadata"]["uid"]
    kube.kubectl("delete", "agentrun", "reborn", "-n", NS)
    assert apply(kube, "AgentRun", "reborn", run_spec(tools=["not-there"])).returncode == 0
    new = get(kube, "agentrun", NS, "reborn")["metadata"]["uid"]
    # The operator's credentials: kube.configure() reads $KUBECONFIG, which the client takes at import
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", gitops_operator.env["KUBECONFIG"])
    path = f"/apis/tether.dev/v1alpha1/namespaces/{NS}/agentruns/reborn"

    async def delete(uid: str) -> bool:
        try:
            return await operator_kube.delete(path, uid=uid)
        finally:
            await operator_kube.close()

    assert asyncio.run(delete(old)) is False
    assert get(kube, "agentrun", NS, "reborn")["metadata"]["uid"] == new
    assert asyncio.run(delete(new)) is True
    wait_for(lambda: not exists(kube, "reborn"), what="reborn deleted")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (-1, "should be greater than or equal to 0"),
        (2**31, "should be less than or equal to 2147483647"),
        ("60", "must be of type integer"),
    ],
)
def test_the_crd_refuses_a_bad_ttl(kube: ControlPlane, gitops_operator: Operator, value: Any, says: str) -> None:
    result = apply(kube, "AgentRun", "bad-ttl", run_spec(ttlSecondsAfterFinished=value))
    assert result.returncode != 0
    assert "spec.ttlSecondsAfterFinished" in result.stderr and says in result.stderr, result.stderr


# ------------------------------------------------------------------ immutable spec and Argo CD


def test_replace_is_refused_force_replace_and_generate_name_make_new_runs(kube: ControlPlane, gitops_operator: Operator) -> None:
    """Argo CD's `Replace=true` syncs with kubectl replace (an update: refused like apply),
    `Force=true,Replace=true` with replace --force (delete, then create: a new run), hooks with
    generateName by create (a new run each time)."""
    assert apply(kube, "AgentRun", "immutable", run_spec(), verb="create").returncode == 0
    first = get(kube, "agentrun", NS, "immutable")["metadata"]["uid"]
    changed = run_spec(input="something else")
    refused = apply(kube, "AgentRun", "immutable", changed, verb="replace")
    assert refused.returncode != 0 and "spec is immutable: create a new AgentRun instead of changing this one" in refused.stderr
    doc = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "immutable"}, "spec": changed}
    kube.kubectl("replace", "--force", "-n", NS, "-f", "-", input=json.dumps(doc))
    again = get(kube, "agentrun", NS, "immutable")
    assert again["metadata"]["uid"] != first and again["spec"]["input"] == "something else"
    generated = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"generateName": "nightly-"}, "spec": run_spec()}
    names = {kube.kubectl("create", "-n", NS, "-o", "name", "-f", "-", input=json.dumps(generated)).stdout.strip() for _ in range(2)}
    assert len(names) == 2 and all(n.startswith("agentrun.tether.dev/nightly-") for n in names)


def test_gitops_operator_never_crashed(gitops_operator: Operator) -> None:
    assert gitops_operator.alive()
    logs = gitops_operator.logs()
    assert "Traceback" not in logs, logs[-4000:]
