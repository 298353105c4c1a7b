"""Approvals are decisions by authenticated people on requests that exist (issue 22), on the real
apiserver with the chart installed, played by users with only the RBAC rights named:

- Mallory may create AgentRuns (not patch them, not create AgentApprovals). She learns the id a
  refund gets from a probe run of the same call, then creates a run pre-annotated
  `tether.dev/approve=<that id>` and `tether.dev/decided-by=cfo@example.com`: nothing is approved,
  the refund does not run, the run awaits approval with its AwaitingApproval Event and a Warning
  that the annotations were ignored. Annotating later (even as the admin) decides nothing either.
- Carol may create AgentApprovals: naming cfo@example.com as the approver is refused at
  admission with a message naming her own identity (naming nobody, she is filled in); Mallory
  may not create one at all.
- An AgentApproval of an id the run has no request for (another run's), or of a run that does
  not exist, is refused with condition Applied=False (NoSuchRequest, NoSuchRun) and a Warning
  Event; nothing runs.
- Carol approves with `tether approve NAMESPACE/NAME ID --yes`: the refund runs, status records
  her identity, time and reason, the AgentApproval is owned by the run; a second decision on the
  same request is AlreadyDecided. The documented YAML works with `kubectl create -f`.
- An AgentApproval created before its request (DecidedBeforeRequest), or while the approval
  policy binding is missing (ApprovalPolicyMissing), decides nothing.

The agents are the OpenAI Agents SDK examples run by the operator's local executor against the
fake provider (the operator of test_e2e_openai.py, serving op-b).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from tests.support.kube import ControlPlane
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider

from .conftest import REPO, SERVED, Operator, Release, condition, get, wait_for
from .test_e2e_openai import EXAMPLES, NS, agent_operator, apply_example, fake, run_store, tether_approve  # noqa: F401

pytestmark = pytest.mark.kube

MALLORY, CAROL = "tether-test-user-3", "tether-test-user"  # static-token users with only the roles below
CFO = "cfo@example.com"


@pytest.fixture(scope="module")
def users(kube: ControlPlane, tether_release: Release) -> dict[str, Any]:
    kube.kubectl("create", "role", "run-creator", "-n", NS, "--verb=create,get,list,watch", "--resource=agentruns.tether.dev")
    kube.kubectl("create", "role", "approver", "-n", NS, "--verb=create,get,list", "--resource=agentapprovals.tether.dev")
    kube.kubectl("create", "role", "run-reader", "-n", NS, "--verb=get,list", "--resource=agentruns.tether.dev")
    # Mallory may use the provider key (the secret-access policy checks the creator's `get`).
    kube.kubectl("create", "role", "use-openai-key", "-n", NS, "--verb=get", "--resource=secrets", "--resource-name=openai")
    kube.kubectl("create", "rolebinding", "mallory-uses-openai-key", "-n", NS, "--role=use-openai-key", f"--user={MALLORY}")
    kube.kubectl("create", "rolebinding", "mallory-creates-runs", "-n", NS, "--role=run-creator", f"--user={MALLORY}")
    kube.kubectl("create", "rolebinding", "carol-approves", "-n", NS, "--role=approver", f"--user={CAROL}")
    kube.kubectl("create", "rolebinding", "carol-reads-runs", "-n", NS, "--role=run-reader", f"--user={CAROL}")
    return {user: kube.kubeconfig_for(user) for user in (MALLORY, CAROL)}


def _phase(kube: ControlPlane, name: str) -> str:
    return str(get(kube, "agentrun", NS, name).get("status", {}).get("phase") or "")


def _settled(kube: ControlPlane, name: str) -> dict[str, Any]:
    """The run once it awaits approval or has finished (a pre-approved run never waits)."""
    wait_for(lambda: _phase(kube, name) in ("AwaitingApproval", "Succeeded", "Failed"), timeout=180, what=f"{name} settled")
    return get(kube, "agentrun", NS, name)


def _events(kube: ControlPlane, name: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}", "-o", "json").stdout
    return list(json.loads(out)["items"])


def _refund_run(kube: ControlPlane, fake: FakeProvider, name: str, annotations: dict[str, str] | None = None) -> str:
    docs = list(yaml.safe_load_all((EXAMPLES / "refund.yaml").read_text()))
    run = next(d for d in docs if d["kind"] == "AgentRun")
    run["metadata"] = {"name": name, **({"annotations": annotations} if annotations else {})}
    run["spec"]["model"]["baseURL"] = fake.base_url("openai")
    return json.dumps(run)


def _approval(run: str, approval_id: str, decided_by: str, decision: str = "approve") -> str:
    spec = {"run": run, "approvalId": approval_id, "decision": decision, "decidedBy": decided_by}
    return json.dumps({"apiVersion": "tether.dev/v1alpha1", "kind": "AgentApproval", "metadata": {"generateName": f"{run}-"}, "spec": spec})


def _create(kube: ControlPlane, users: dict[str, Any], user: str | None, doc: str) -> Any:
    kubeconfig = None if user is None else users[user]
    return kube.kubectl("create", "-n", NS, "-f", "-", "-o", "name", input=doc, kubeconfig=kubeconfig, check=False)


def _applied(kube: ControlPlane, created: Any) -> dict[str, Any]:
    assert created.returncode == 0, created.stderr
    name = created.stdout.strip().split("/")[-1]
    return wait_for(lambda: condition(o := get(kube, "agentapproval", NS, name), "Applied") and o, what=f"{name} looked at")


@pytest.fixture(scope="module")
def probe(kube: ControlPlane, users: dict[str, Any], fake: FakeProvider, agent_operator: Operator) -> dict[str, Any]:
    """Mallory's probe: a run making the same refund call, awaiting approval (its id is public)."""
    tools = [d for d in yaml.safe_load_all((EXAMPLES / "refund.yaml").read_text()) if d["kind"] == "AgentTool"]
    kube.kubectl("apply", "-n", NS, "-f", "-", input="\n---\n".join(json.dumps(t) for t in tools))  # the admin's
    kube.kubectl("create", "-n", NS, "-f", "-", input=_refund_run(kube, fake, "refund-probe"), kubeconfig=users[MALLORY])
    obj = _settled(kube, "refund-probe")
    assert obj["status"]["phase"] == "AwaitingApproval"
    return obj


def test_a_run_pre_approved_by_its_creator_is_not_approved(
    kube: ControlPlane,
    users: dict[str, Any],
    fake: FakeProvider,
    agent_operator: Operator,
    probe: dict[str, Any],
) -> None:
    assert kube.kubectl("auth", "can-i", "patch", "agentruns.tether.dev", "-n", NS, f"--as={MALLORY}", check=False).returncode != 0
    probe_id = probe["status"]["approvals"][0]["id"]
    forged = {"tether.dev/approve": probe_id, "tether.dev/decided-by": CFO}
    kube.kubectl("create", "-n", NS, "-f", "-", input=_refund_run(kube, fake, "refund-forged", forged), kubeconfig=users[MALLORY])

    obj = _settled(kube, "refund-forged")
    st = obj["status"]
    assert st["phase"] == "AwaitingApproval", f"pre-approved by annotation: {json.dumps(st.get('approvals'))}"
    (pending,) = st["approvals"]
    assert not pending.get("decision") and not pending.get("by") and pending["id"] != probe_id
    assert "result" not in st  # the refund did not run: the agent is suspended before the call
    events = _events(kube, "refund-forged")
    assert "AwaitingApproval" in {e["reason"] for e in events}
    ignored = [e for e in events if e["reason"] == "ApprovalAnnotationIgnored"]
    assert ignored and all(e["type"] == "Warning" for e in ignored)
    assert f"tether approve {NS}/refund-forged ID --yes" in ignored[0]["message"]

    # Annotating with the run's real id later decides nothing either, whoever does it.
    def warnings() -> int:
        return len([e for e in _events(kube, "refund-forged") if e["reason"] == "ApprovalAnnotationIgnored"])

    before = warnings()
    kube.kubectl("annotate", "agentrun", "refund-forged", "-n", NS, f"tether.dev/approve={pending['id']}", "--overwrite")
    wait_for(lambda: warnings() > before, what="warned again")
    time.sleep(3)  # a few of the operator's polls
    obj = get(kube, "agentrun", NS, "refund-forged")
    assert obj["status"]["phase"] == "AwaitingApproval" and not obj["status"]["approvals"][0].get("decision")
    assert all("Refunded" not in e["message"] for e in _events(kube, "refund-forged"))


def test_an_approver_cannot_name_someone_else(kube: ControlPlane, users: dict[str, Any], probe: dict[str, Any]) -> None:
    probe_id = probe["status"]["approvals"][0]["id"]
    forged = _create(kube, users, CAROL, _approval("refund-probe", probe_id, CFO))
    assert forged.returncode != 0
    assert f"spec.decidedBy must be your own identity: you are {CAROL}" in forged.stderr, forged.stderr
    # Naming nobody: the chart's MutatingAdmissionPolicy (v1 on this apiserver) names the creator.
    unnamed = json.loads(_approval("refund-probe", probe_id, ""))
    del unnamed["spec"]["decidedBy"]
    filled = kube.kubectl(
        "create", "-n", NS, "-f", "-", "--dry-run=server", "-o", "json", input=json.dumps(unnamed), kubeconfig=users[CAROL], check=False
    )
    assert filled.returncode == 0, filled.stderr
    assert json.loads(filled.stdout)["spec"]["decidedBy"] == CAROL
    # Creating runs is not approving them.
    assert _create(kube, users, MALLORY, _approval("refund-probe", probe_id, MALLORY)).returncode != 0
    assert kube.kubectl("auth", "can-i", "create", "agentapprovals.tether.dev", "-n", NS, f"--as={MALLORY}", check=False).returncode != 0
    approvals = json.loads(kube.kubectl("get", "agentapprovals", "-n", NS, "-o", "json").stdout)["items"]
    assert [a for a in approvals if a["spec"]["run"] == "refund-probe"] == []
    assert get(kube, "agentrun", NS, "refund-probe")["status"]["phase"] == "AwaitingApproval"


def test_an_approval_of_no_request_is_refused(kube: ControlPlane, users: dict[str, Any], probe: dict[str, Any]) -> None:
    forged = _settled(kube, "refund-forged")
    other_id = probe["status"]["approvals"][0]["id"]  # a real id, of another run
    refused = _applied(kube, _create(kube, users, CAROL, _approval("refund-forged", other_id, CAROL)))
    applied = condition(refused, "Applied")
    assert (applied["status"], applied["reason"]) == ("False", "NoSuchRequest")
    assert f"AgentRun refund-forged has no approval request {other_id}" in applied["message"]
    assert "NoSuchRequest" in {e["reason"] for e in _events(kube, refused["metadata"]["name"]) if e["type"] == "Warning"}

    ghost = condition(_applied(kube, _create(kube, users, CAROL, _approval("no-such-run", other_id, CAROL))), "Applied")
    assert (ghost["status"], ghost["reason"]) == ("False", "NoSuchRun")

    time.sleep(2)
    for name in ("refund-forged", "refund-probe"):
        obj = get(kube, "agentrun", NS, name)
        assert obj["status"]["phase"] == "AwaitingApproval" and not obj["status"]["approvals"][0].get("decision"), name
    assert forged["status"]["approvals"][0]["id"] != other_id


def test_a_legitimate_approver_continues_the_run(
    kube: ControlPlane,
    users: dict[str, Any],
    agent_operator: Operator,
    probe: dict[str, Any],
) -> None:
    run = _settled(kube, "refund-forged")
    rid = run["status"]["approvals"][0]["id"]
    lie = tether_approve(kube, CAROL, f"{NS}/refund-forged", rid, "--yes", "--by", CFO)
    assert lie.returncode == 2 and f"the approver is who you are ({CAROL}), not --by {CFO}" in lie.stderr, lie.stderr
    proc = tether_approve(kube, CAROL, f"{NS}/refund-forged", rid, "--yes", "--reason", "customer is right")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"approve {rid} of AgentRun {NS}/refund-forged as {CAROL}" in proc.stdout
    assert f"Applied: approval {rid} (issue-refund) approved by {CAROL}: customer is right" in proc.stdout

    wait_for(lambda: _phase(kube, "refund-forged") == "Succeeded", timeout=180, what="refund-forged Succeeded")
    obj = get(kube, "agentrun", NS, "refund-forged")
    (decided,) = obj["status"]["approvals"]
    assert (decided["decision"], decided["by"], decided["reason"]) == ("approved", CAROL, "customer is right")
    assert decided["decidedAt"] and "Refunded" in obj["status"]["result"]["output"]
    decided_events = [e for e in _events(kube, "refund-forged") if e["reason"] == "ApprovalDecided"]
    assert decided_events and f"approved by {CAROL}" in decided_events[0]["message"]
    (approval,) = [
        a
        for a in json.loads(kube.kubectl("get", "agentapprovals", "-n", NS, "-o", "json").stdout)["items"]
        if a["spec"]["approvalId"] == rid
    ]
    assert [(o["kind"], o["name"], o["uid"]) for o in approval["metadata"]["ownerReferences"]] == [
        ("AgentRun", "refund-forged", obj["metadata"]["uid"])
    ]
    # The first decision wins: a later one on the same request is refused.
    late = condition(_applied(kube, _create(kube, users, CAROL, _approval("refund-forged", rid, CAROL, "decline"))), "Applied")
    assert (late["status"], late["reason"]) == ("False", "AlreadyDecided") and f"already approved by {CAROL}" in late["message"]

    # kubectl with the documented manifest (operator/README.md): decline the probe.
    doc = (REPO / "examples" / "approval.yaml").read_text()
    pid = probe["status"]["approvals"][0]["id"]
    doc = doc.replace("refund-example", "refund-probe").replace("APPROVAL_ID", pid).replace("alice@example.com", CAROL)
    doc = doc.replace("decision: approve", "decision: decline")
    created = kube.kubectl("create", "-n", NS, "-f", "-", input=doc, kubeconfig=users[CAROL], check=False)
    assert created.returncode == 0, created.stderr
    wait_for(lambda: _phase(kube, "refund-probe") == "Succeeded", timeout=180, what="refund-probe Succeeded")
    (declined,) = get(kube, "agentrun", NS, "refund-probe")["status"]["approvals"]
    assert (declined["decision"], declined["by"]) == ("declined", CAROL)


def test_a_decision_dated_before_its_request_is_refused(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    """A request recorded after the AgentApproval was created (here: dated a minute ahead) is not
    decided by it; only decisions made once the request exists count."""
    ns = SERVED[0]
    spec = {"framework": "openai", "model": {"name": "gpt-4.1", "baseURL": "http://127.0.0.1:9/v1"}, "input": "hi", "retries": 0}
    body = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "early-bird"}, "spec": spec}
    kube.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(body))
    uid = get(kube, "agentrun", ns, "early-bird")["metadata"]["uid"]
    aid = "0123456789ab" + "f" * 16
    request = {"id": aid, "tool": "issue-refund", "prompt": "Refund?", "arguments": {}, "requestedAt": time.time() + 60}
    open_store(f"{operator.store_url}/{ns}").create(f"approvals/{uid}/{aid[:12]}.request.json", json.dumps(request).encode())
    doc = json.loads(_approval("early-bird", aid, "tether-admin"))
    created = kube.kubectl("create", "-n", ns, "-f", "-", "-o", "name", input=json.dumps(doc), check=False)
    assert created.returncode == 0, created.stderr
    name = created.stdout.strip().split("/")[-1]
    obj = wait_for(lambda: condition(o := get(kube, "agentapproval", ns, name), "Applied") and o, what="looked at")
    applied = condition(obj, "Applied")
    assert (applied["status"], applied["reason"]) == ("False", "DecidedBeforeRequest"), applied
    assert open_store(f"{operator.store_url}/{ns}").get(f"approvals/{uid}/{aid[:12]}.decision.json") is None


def test_no_approval_is_honoured_without_the_policy_binding(kube: ControlPlane, tether_release: Release, operator: Operator) -> None:
    """With the binding gone anyone who may create an AgentApproval could name any approver: the
    operator (not single-tenant) applies none, says why, and decides nothing."""
    ns = SERVED[0]
    spec = {"framework": "openai", "model": {"name": "gpt-4.1", "baseURL": "http://127.0.0.1:9/v1"}, "input": "hi", "retries": 0}
    body = {"apiVersion": "tether.dev/v1alpha1", "kind": "AgentRun", "metadata": {"name": "unbound"}, "spec": spec}
    kube.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(body))
    uid = get(kube, "agentrun", ns, "unbound")["metadata"]["uid"]
    aid = "0123456789ab" + "e" * 16
    request = {"id": aid, "tool": "issue-refund", "prompt": "Refund?", "arguments": {}, "requestedAt": time.time() - 60}
    store = open_store(f"{operator.store_url}/{ns}")
    store.create(f"approvals/{uid}/{aid[:12]}.request.json", json.dumps(request).encode())
    saved = json.loads(kube.kubectl("get", "validatingadmissionpolicybinding", "tether-approvals", "-o", "json").stdout)
    kube.kubectl("delete", "validatingadmissionpolicybinding", "tether-approvals")
    try:
        forged = json.loads(_approval("unbound", aid, CFO))  # nothing at admission stops this now
        # the apiserver's policy cache notices the deletion within a moment
        created = wait_for(
            lambda: (p := kube.kubectl("create", "-n", ns, "-f", "-", "-o", "name", input=json.dumps(forged), check=False)).returncode == 0
            and p,
            what="admitted without the binding",
        )
        name = created.stdout.strip().split("/")[-1]
        obj = wait_for(lambda: condition(o := get(kube, "agentapproval", ns, name), "Applied") and o, what="looked at")
    finally:
        meta = saved["metadata"]
        saved["metadata"] = {k: meta[k] for k in ("name", "labels", "annotations") if k in meta}
        kube.kubectl("create", "-f", "-", input=json.dumps(saved))
        dry = ("create", "-n", ns, "-f", "-", "--dry-run=server")
        wait_for(lambda: kube.kubectl(*dry, input=json.dumps(forged), check=False).returncode != 0, what="the binding in force again")
    applied = condition(obj, "Applied")
    assert (applied["status"], applied["reason"]) == ("False", "ApprovalPolicyMissing"), applied
    assert "ValidatingAdmissionPolicyBinding tether-approvals does not exist" in applied["message"]
    assert store.get(f"approvals/{uid}/{aid[:12]}.decision.json") is None
