"""Trust boundaries on the kind cluster, played as the attacker would: each user holds only the RBAC
rights named (a Role bound to that user name; kubectl impersonates them with `--as`), against the
chart's operator, admission policies and real pods. (The same attacks on the bare apiserver, in
more variants: tests/controller/test_owned_objects.py and test_approvals.py.)

Runs before test_kind.py, whose last test uninstalls the chart.
"""

from __future__ import annotations

import json
import subprocess
import uuid

from tests.e2e.cluster import (
    NS,
    apply,
    delete_run,
    ensure_key_secret,
    example,
    fake_provider,
    kubectl,
    pods,
    poll,
    status,
    wait_phase,
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def user(name: str, rules: list[dict[str, list[str]]]) -> str:
    """A Role with exactly `rules`, bound to the user `name` in the test namespace."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": f"e2e-{name}", "namespace": NS},
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": f"e2e-{name}", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"e2e-{name}"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}],
    }
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding]}))
    return name


def as_user(name: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """kubectl as `name` (impersonated by the admin's kubeconfig): the outcome, refused or not."""
    return subprocess.run(["kubectl", f"--as={name}", *args], input=input, capture_output=True, text=True, timeout=120)


def decision_doc(run: str, approval_id: str, decided_by: str) -> str:
    spec = {"run": run, "approvalId": approval_id, "decision": "approve", "decidedBy": decided_by}
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": "AgentApproval", "metadata": {"generateName": f"{run}-"}, "spec": spec})


def refunds(name: str) -> int:
    """How many times issue_refund ran, over every attempt's pod of the run."""
    return sum(kubectl("logs", "-n", NS, p["metadata"]["name"], "--all-containers").count("[tool] issue_refund(") for p in pods(name))


def test_a_decision_set_at_creation_is_ignored_and_only_an_approver_can_decide_as_herself():
    """eve may create AgentRuns and `use` the provider key, nothing else: her run carries a decision in annotations (the old
    pre-approval attack) and still waits for an approver; she can make no AgentApproval. cfo may
    create AgentApprovals: one naming somebody else as decidedBy is refused at admission; hers is
    applied, recorded as hers, and the refund runs once."""
    eve = user(
        "eve",
        [
            {"apiGroups": ["tether.dev"], "resources": ["agentruns"], "verbs": ["create", "get"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["openai"], "verbs": ["use"]},  # the provider key, unread
        ],
    )
    cfo = user("cfo", [{"apiGroups": ["tether.dev"], "resources": ["agentapprovals"], "verbs": ["create"]}])
    name = unique("preapproved")
    run, tools = example("openai", "refund", name)
    run["metadata"]["annotations"] = {"tether.dev/approve": "issue-refund", "tether.dev/decided-by": "cfo@example.com"}
    ensure_key_secret(run)  # the admin's provider key (labelled usable) and tools
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": tools}))
    created = as_user(eve, "create", "-n", NS, "-f", "-", input=json.dumps(run))
    assert created.returncode == 0, created.stderr
    try:
        waiting = wait_phase(name, "AwaitingApproval", "Succeeded", timeout=300)
        assert waiting["phase"] == "AwaitingApproval", "a decision in annotations was applied"
        [pending] = [a for a in waiting.get("approvals") or [] if not a.get("decision")]
        assert refunds(name) == 0
        # eve cannot decide at all; cfo cannot decide in somebody else's name.
        by_eve = as_user(eve, "create", "-n", NS, "-f", "-", input=decision_doc(name, pending["id"], eve))
        assert by_eve.returncode != 0 and "forbidden" in by_eve.stderr.lower(), by_eve.stderr
        in_cfos_name = as_user(cfo, "create", "-n", NS, "-f", "-", input=decision_doc(name, pending["id"], "cfo@example.com"))
        assert in_cfos_name.returncode != 0 and "decidedBy" in in_cfos_name.stderr, in_cfos_name.stderr
        assert status(name)["phase"] == "AwaitingApproval"
        # cfo, as herself: applied and recorded as hers.
        mine = as_user(cfo, "create", "-n", NS, "-f", "-", input=decision_doc(name, pending["id"], cfo))
        assert mine.returncode == 0, mine.stderr
        final = wait_phase(name, "Succeeded", timeout=300)
        [decided] = [a for a in final["approvals"] if a["id"] == pending["id"]]
        assert (decided["decision"], decided["by"]) == ("approved", cfo)
        assert refunds(name) == 1
    finally:
        delete_run(name)


def test_a_squatted_attempt_pod_fails_the_run_and_gets_nothing():
    """mallory may create pods (no Secrets, no AgentRuns). While attempt 1 of a run waits on its
    model, she creates the pod attempt 2 will be named (the name follows from status.execution,
    which `get agentruns` shows), then attempt 1's pod dies. The operator finds a pod it did not
    make under its name: the run fails with OwnedObjectConflict, mallory's pod is left as she made
    it (no provider key, no request, no store socket added), and no attempt 2 runs."""
    mallory = user("mallory", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]}])
    name = unique("squat")
    run, tools = example("openai", "research", name)
    fake_provider("/_control/reset", "POST")
    fake_provider("/_control/faults", "POST", [{"kind": "slow_first_byte:60", "after": 1}])  # hold turn 2
    apply(run, tools)
    squat = None
    try:
        poll("a finished tool", lambda: (status(name).get("steps") or {}).get("toolLive", 0) >= 1, 300)
        execution = status(name)["execution"]["name"]
        squat = f"{execution}-2"
        restricted = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": squat, "namespace": NS},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "runtime",
                        "image": "tether-e2e/examples-openai:e2e",
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "600"],
                        "securityContext": restricted,
                    }
                ],
            },
        }
        made = as_user(mallory, "create", "-f", "-", input=json.dumps(pod))
        assert made.returncode == 0, made.stderr
        before = json.loads(kubectl("get", "pod", squat, "-n", NS, "-o", "json"))
        [first] = pods(name)
        kubectl("delete", "pod", first["metadata"]["name"], "-n", NS, "--wait=false")
        final = wait_phase(name, "Failed", "Succeeded", timeout=300)
        assert final["phase"] == "Failed", final
        assert any(c.get("reason") == "OwnedObjectConflict" for c in final["conditions"]), final["conditions"]
        after = json.loads(kubectl("get", "pod", squat, "-n", NS, "-o", "json"))
        assert after["metadata"]["uid"] == before["metadata"]["uid"] and after["spec"] == before["spec"], "the squatter's pod was touched"
        assert "secret" not in json.dumps(after["spec"].get("volumes", [])).lower()
        assert not after["metadata"].get("ownerReferences"), "the operator adopted the squatter's pod"
        warnings = kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name},type=Warning", "-o", "json")
        assert "OwnedObjectConflict" in warnings
    finally:
        fake_provider("/_control/reset", "POST")
        if squat:
            kubectl("delete", "pod", squat, "-n", NS, "--ignore-not-found", "--wait=false")
        delete_run(name)
