"""``tether approve RUN ID --yes|--no [--reason TEXT] [--by NAME]``: decide a pending approval.

RUN is the run id (an AgentRun's uid, or the name ``tether run`` used). The decision is written
to the store; the next attempt of the run replays to the approval and goes on. For AgentRuns on
Kubernetes the operator does this when you annotate the AgentRun (see the operator's README).
"""

from __future__ import annotations

import argparse
import getpass
import sys

from ..approvals import decide, list_approvals
from ..errors import ConfigError
from ..stores import open_store


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tether approve")
    p.add_argument("run")
    p.add_argument("id", nargs="?", help="approval id (omit to list the run's approvals)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--yes", action="store_true")
    group.add_argument("--no", action="store_true")
    p.add_argument("--reason")
    p.add_argument("--by", default=None)
    p.add_argument("--store", default=None)
    args = p.parse_args(argv)
    store = open_store(args.store)
    if args.id is None or not (args.yes or args.no):
        for a in list_approvals(store, args.run):
            state = "pending" if a["decision"] is None else ("approved" if a["decision"]["approved"] else "declined")
            print(f"{a['id']}  {state:<9} {a['tool']}: {a['prompt']}")
        return 0
    try:
        decide(store, args.run, args.id, args.yes, by=args.by or getpass.getuser(), reason=args.reason)
    except ConfigError as e:
        print(f"tether approve: {e}", file=sys.stderr)
        return 2
    print(f"{'approved' if args.yes else 'declined'} {args.id} of run {args.run}; run it again to continue")
    return 0
