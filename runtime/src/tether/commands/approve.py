"""``tether approve RUN ID --yes|--no [--reason TEXT] [--by NAME]``: decide a pending approval.

RUN is either a run id (the name ``tether run`` used) — the decision is written to the store
directly — or ``NAMESPACE/NAME`` of an AgentRun on Kubernetes: then an AgentApproval is created
through the current kubeconfig, decided by who the apiserver says you are (a SelfSubjectReview,
as ``kubectl auth whoami``), and the operator records the decision and resumes the run. Either
way the next attempt replays to the approval and goes on.
"""

from __future__ import annotations

import getpass
import json
import sys
import time
from typing import Any

from ..api import GROUP, VERSION
from ..approvals import decide, list_approvals
from ..contract import APPROVAL_PLURAL
from ..errors import ConfigError
from ..stores import open_store
from . import command_name, parser, store_option


def main(argv: list[str]) -> int:
    p = parser("approve", __doc__.split("\n\n")[0])
    p.add_argument("run", help="a run id (decided in the store) or NAMESPACE/NAME of an AgentRun (an AgentApproval, as you)")
    p.add_argument("id", nargs="?", help="approval id (omit to list the run's approvals)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--yes", action="store_true", help="approve: the tool call runs when the run goes on")
    group.add_argument("--no", action="store_true", help="decline: the agent is told the call was declined")
    p.add_argument("--reason", help="why, recorded with the decision")
    p.add_argument("--by", default=None, help="approver's name (local store only; on Kubernetes it is who you are)")
    store_option(p, "; local run ids only")
    p.add_argument("--wait", type=float, default=15.0, help="seconds to wait for the operator to apply it (Kubernetes)")
    args = p.parse_args(argv)
    if "/" in args.run:
        if args.id is None or not (args.yes or args.no):
            print("tether approve NAMESPACE/NAME ID needs --yes or --no (pending approvals: kubectl get ar NAME -o yaml)", file=sys.stderr)
            return 2
        return _agent_approval(args.run, args.id, args.yes, args.by, args.reason, args.wait)
    by = args.by or getpass.getuser()
    store = open_store(args.store)
    if args.id is None or not (args.yes or args.no):
        for a in list_approvals(store, args.run):
            state = "pending" if a["decision"] is None else ("approved" if a["decision"]["approved"] else "declined")
            print(f"{a['id']}  {state:<9} {a['tool']}: {a['prompt']}")
        return 0
    try:
        decide(store, args.run, args.id, args.yes, by=by, reason=args.reason)
    except ConfigError as e:
        print(f"tether approve: {e}", file=sys.stderr)
        return 2
    print(f"{'approved' if args.yes else 'declined'} {args.id} of run {args.run}; run it again to continue ({command_name()} run ...)")
    return 0


def _agent_approval(run: str, approval_id: str, approved: bool, by: str | None, reason: str | None, wait: float) -> int:
    """Create an AgentApproval as the current kubeconfig's user and report what the operator made of it."""
    try:
        from kubernetes import client, config
    except ImportError:
        print("tether approve NAMESPACE/NAME needs the kubernetes package (pip install kubernetes)", file=sys.stderr)
        return 2
    namespace, _, name = run.partition("/")
    config.load_kube_config()
    try:  # who the apiserver says we are (`kubectl auth whoami`): the admission policy wants exactly that
        review = client.AuthenticationV1Api().create_self_subject_review(client.V1SelfSubjectReview())
        me = str(review.status.user_info.username)  # type: ignore[union-attr]
    except client.ApiException as e:
        print(f"tether approve: cannot ask the apiserver who you are (SelfSubjectReview): {e.status} {e.reason}", file=sys.stderr)
        return 2
    if by and by != me:
        print(f"tether approve: on Kubernetes the approver is who you are ({me}), not --by {by}", file=sys.stderr)
        return 2
    spec = {"run": name, "approvalId": approval_id, "decision": "approve" if approved else "decline", "decidedBy": me}
    if reason:
        spec["reason"] = reason
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentApproval", "metadata": {"generateName": f"{name}-"}, "spec": spec}
    api = client.CustomObjectsApi()
    try:
        created: dict[str, Any] = api.create_namespaced_custom_object(GROUP, VERSION, namespace, APPROVAL_PLURAL, body)  # type: ignore[assignment]
    except client.ApiException as e:
        print(f"tether approve: cannot create an AgentApproval in {namespace}: {e.status} {_message(e)}", file=sys.stderr)
        return 2
    aa = created["metadata"]["name"]
    print(f"AgentApproval {namespace}/{aa}: {spec['decision']} {approval_id} of AgentRun {run} as {me}")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        obj: dict[str, Any] = api.get_namespaced_custom_object(GROUP, VERSION, namespace, APPROVAL_PLURAL, aa)  # type: ignore[assignment]
        applied = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Applied"), None)
        if applied is not None:
            print(f"{applied['reason']}: {applied.get('message', '')}", file=sys.stdout if applied["status"] == "True" else sys.stderr)
            return 0 if applied["status"] == "True" else 2
        time.sleep(0.5)
    print(f"the operator has not applied it yet: kubectl get agentapproval {aa} -n {namespace}")
    return 0


def _message(e: Any) -> str:
    try:
        return str(json.loads(e.body)["message"])
    except (TypeError, ValueError, KeyError):
        return str(e.reason)
