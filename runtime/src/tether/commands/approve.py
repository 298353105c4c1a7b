"""``tether approve RUN ID --yes|--no [--reason TEXT] [--by NAME]``: decide a pending approval.

RUN is either a run id (the name ``tether run`` used, or an AgentRun's uid) — the decision is
written to the store directly — or ``NAMESPACE/NAME`` of an AgentRun on Kubernetes: then the
AgentRun is annotated (``tether.dev/approve`` or ``tether.dev/decline``, with ``decided-by`` and
``reason``) through the current kubeconfig, and the operator records the decision and resumes
the run. Either way the next attempt replays to the approval and goes on.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from ..approvals import decide, list_approvals
from ..errors import ConfigError
from ..stores import open_store
from . import command_name


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"{command_name()} approve", description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("id", nargs="?", help="approval id (omit to list the run's approvals)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--yes", action="store_true")
    group.add_argument("--no", action="store_true")
    p.add_argument("--reason")
    p.add_argument("--by", default=None)
    p.add_argument("--store", default=None)
    args = p.parse_args(argv)
    by = args.by or getpass.getuser()
    if "/" in args.run:
        if args.id is None or not (args.yes or args.no):
            print("tether approve NAMESPACE/NAME ID needs --yes or --no (pending approvals: kubectl get ar NAME -o yaml)", file=sys.stderr)
            return 2
        return _annotate(args.run, args.id, args.yes, by, args.reason)
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


def _annotate(run: str, approval_id: str, approved: bool, by: str, reason: str | None) -> int:
    """Ask the operator to decide, through the AgentRun's annotations."""
    try:
        from kubernetes import client, config
    except ImportError:
        print("tether approve NAMESPACE/NAME needs the kubernetes package (pip install kubernetes)", file=sys.stderr)
        return 2
    namespace, _, name = run.partition("/")
    annotations = {f"tether.dev/{'approve' if approved else 'decline'}": approval_id, "tether.dev/decided-by": by}
    if reason:
        annotations["tether.dev/reason"] = reason
    config.load_kube_config()
    try:
        client.CustomObjectsApi().patch_namespaced_custom_object(
            "tether.dev", "v1alpha1", namespace, "agentruns", name, {"metadata": {"annotations": annotations}}
        )
    except client.ApiException as e:
        print(f"tether approve: cannot annotate AgentRun {run}: {e.status} {e.reason}", file=sys.stderr)
        return 2
    print(f"asked the operator to {'approve' if approved else 'decline'} {approval_id} of AgentRun {run}")
    return 0
