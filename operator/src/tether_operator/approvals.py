"""AgentApprovals: decisions by authenticated people on approval requests that exist.

`apply_approval` is the body of the kopf handler for a new AgentApproval. It records the decision
in the run's store (`tether.approvals.decide`, where the run's next attempt finds it) only if

    the policy binding that makes spec.decidedBy its creator's identity is in place
                                    (or the chart says single-tenant)   else ApprovalPolicyMissing
    the AgentRun spec.run exists in the namespace                       else NoSuchRun
    spec.approvalId is a request of that run in the store               else NoSuchRequest
    the AgentApproval was created after the request (clock skew aside)  else DecidedBeforeRequest
    nobody decided it before (the first decision wins)                  else AlreadyDecided

and says which in its condition `Applied` (True, or False with the reason) and an Event. An
applied AgentApproval is owned by its run (deleted with it). The recorded approver is
spec.decidedBy, which the admission policy made the creator's Kubernetes username.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

import kopf

from tether import approvals as tether_approvals
from tether.api import API_VERSION, AgentApprovalSpec, ManifestError, read_spec
from tether.contract import APPROVAL_PLURAL
from tether.errors import ConfigError
from tether.stores import Store

from . import conditions as C
from . import kube
from .conditions import Reason
from .settings import Settings
from .times import epoch

log = logging.getLogger(__name__)

#: How much earlier than the request an AgentApproval's creationTimestamp may be and still count
#: as made after it: creationTimestamp has whole seconds, and requestedAt is the runtime's clock
#: (a pod on another node), not the apiserver's.
CLOCK_SKEW_SECONDS = 5.0

POLICY_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


class Refused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


async def policy_problem(settings: Settings) -> str | None:
    """Why the approver's identity is not checked at admission, or None if it is."""
    if settings.single_tenant:
        return None
    name = settings.approval_policy_binding
    try:
        binding = await kube.request("GET", f"{POLICY_BINDINGS}/{name}")
    except kube.KubeError as exc:
        return f"cannot read ValidatingAdmissionPolicyBinding {name} ({exc.status}): the operator needs `get` on it"
    if binding is None:
        return f"ValidatingAdmissionPolicyBinding {name} does not exist"
    if "Deny" not in ((binding.get("spec") or {}).get("validationActions") or []):
        return f"ValidatingAdmissionPolicyBinding {name} does not deny"
    return None


async def _decide(body: kopf.Body, spec: AgentApprovalSpec, run: dict[str, Any], store: Store) -> dict[str, Any]:
    """Record the decision; the request decided, or raise Refused."""
    uid, name = run["metadata"]["uid"], spec.run
    request = await asyncio.to_thread(tether_approvals.read_request, store, uid, spec.approval_id)
    if request is None:
        raise Refused(
            Reason.NO_SUCH_REQUEST, f"AgentRun {name} has no approval request {spec.approval_id} (its ids are in status.approvals)"
        )
    created, requested = epoch(body.meta.get("creationTimestamp")), epoch(request.get("requestedAt"))
    if created is None or requested is None or created < requested - CLOCK_SKEW_SECONDS:
        raise Refused(
            Reason.DECIDED_BEFORE_REQUEST,
            f"this AgentApproval was created before AgentRun {name} asked for approval {spec.approval_id}: "
            "only a decision made after the request counts",
        )
    previous = await asyncio.to_thread(tether_approvals.read_decision, store, uid, spec.approval_id)
    try:
        if previous is None:
            await asyncio.to_thread(
                tether_approvals.decide, store, uid, spec.approval_id, spec.decision == "approve", spec.decided_by, spec.reason
            )
            return request
    except ConfigError:  # decided meanwhile (a timeout, another AgentApproval): that one stands
        previous = await asyncio.to_thread(tether_approvals.read_decision, store, uid, spec.approval_id)
    verdict = "approved" if previous and previous.approved else "declined"
    raise Refused(
        Reason.ALREADY_DECIDED, f"approval {spec.approval_id} of AgentRun {name} was already {verdict} by {previous and previous.by}"
    )


async def apply_approval(body: kopf.Body, settings: Settings, store: Store) -> None:
    status = dict(body.get("status") or {})
    if C.get_condition(list(status.get("conditions") or []), C.APPLIED) is not None:
        return  # looked at once, for good
    namespace, name, generation = body.meta["namespace"], body.meta["name"], body.meta.get("generation", 1)
    run: dict[str, Any] | None = None
    try:
        spec = read_spec(AgentApprovalSpec, dict(body.spec))
        problem = await policy_problem(settings)
        if problem is not None:
            raise Refused(
                Reason.APPROVAL_POLICY_MISSING,
                f"{problem}, so nothing makes spec.decidedBy the creator's identity: no AgentApproval is honoured "
                "(install the chart's approval policy, or declare the cluster single-tenant)",
            )
        run = await kube.request("GET", f"/apis/{API_VERSION}/namespaces/{namespace}/agentruns/{spec.run}")
        if run is None:
            raise Refused(Reason.NO_SUCH_RUN, f"AgentRun {spec.run} does not exist in namespace {namespace}")
        request = await _decide(body, spec, run, store)
    except (Refused, ManifestError) as exc:
        reason, message = (exc.reason, exc.message) if isinstance(exc, Refused) else (Reason.INVALID_SPEC, str(exc))
        if run is not None:
            await _own(namespace, name, run)
        await _report(namespace, name, generation, False, reason, message)
        kopf.event(body, type="Warning", reason=reason, message=message[:1024])
        return
    await _own(namespace, name, run)
    verdict = "approved" if spec.decision == "approve" else "declined"
    why = f": {spec.reason}" if spec.reason else ""
    message = f"approval {spec.approval_id} ({request.get('tool')}) {verdict} by {spec.decided_by}{why}"
    await _report(namespace, name, generation, True, Reason.APPLIED, f"{message} (AgentRun {spec.run})")
    kopf.event(body, type="Normal", reason=Reason.APPLIED, message=message[:1024])
    kopf.event(cast(kopf.Body, run), type="Normal", reason=Reason.APPROVAL_DECIDED, message=f"{message} (AgentApproval {name})"[:1024])


async def _report(namespace: str, name: str, generation: int, applied: bool, reason: str, message: str) -> None:
    conditions = C.set_condition([], C.APPLIED, applied, reason, message, generation)
    await kube.patch_status(APPROVAL_PLURAL, namespace, name, {"observedGeneration": generation, "conditions": conditions})


async def _own(namespace: str, name: str, run: dict[str, Any]) -> None:
    """The AgentApproval goes with its run (garbage collection)."""
    meta = run["metadata"]
    owner = {"apiVersion": API_VERSION, "kind": "AgentRun", "name": meta["name"], "uid": meta["uid"]}
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/{APPROVAL_PLURAL}/{name}"
    current = await kube.request("GET", path)
    if current is None:
        return
    refs = list((current.get("metadata") or {}).get("ownerReferences") or [])
    if any(r.get("uid") == meta["uid"] for r in refs):
        return
    await kube.request("PATCH", path, {"metadata": {"ownerReferences": [*refs, owner]}}, "application/merge-patch+json")
