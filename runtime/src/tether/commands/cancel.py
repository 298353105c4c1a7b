"""``tether cancel RUN [--reason TEXT] [--by NAME] [--store URL]``: stop a run for good.

A ``tether run`` of that run on this machine is stopped cleanly, as Ctrl-C stops it (SIGTERM:
no new step starts, tool calls already running finish and are recorded; ``tether.stopping``),
and the run is marked cancelled: its progress says ``Cancelled`` and ``tether run`` never
resumes it (``--run-id NEW`` starts a new run). A run that is not running (waiting for an
approval, interrupted, failed) is marked cancelled at once. A finished run is left as it is.

On Kubernetes (RUN is ``NAMESPACE/NAME``) an AgentRun is stopped by deleting it: the operator
deletes its runner pods first (SIGTERM, the same clean stop) — ``kubectl delete``, as printed.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import sys
import time

from ..contract import cancel_key, manifest_key
from ..progress import read_progress
from ..stores import open_store
from . import agentrun_refused, command_name, parser, store_option
from .run import cancelled, mark_cancelled, runner

#: What stops an AgentRun (``NAMESPACE/NAME``) instead.
_AGENTRUN = (
    "an AgentRun is stopped by deleting it (the operator deletes its runner pods first: SIGTERM, a clean stop; "
    "its journal stays in the store):\n  kubectl delete agentrun {name} -n {namespace}"
)


def main(argv: list[str]) -> int:
    p = parser("cancel", __doc__.split("\n\n")[0])
    p.add_argument("run", help="a run id (the name `tether run` used), or NAMESPACE/NAME of an AgentRun on Kubernetes")
    p.add_argument("--reason", default=None, help="why, kept with the run (shown by status and list)")
    p.add_argument("--by", default=None, help="who cancels (default: your user name)")
    store_option(p)
    p.add_argument(
        "--wait", type=float, default=60.0, metavar="SECONDS", help="how long to wait for a running tether run to stop (default 60)"
    )
    args = p.parse_args(argv)
    cli = command_name()
    if agentrun_refused("cancel", args.run, _AGENTRUN):
        return 2
    store = open_store(args.store)
    progress = read_progress(store, args.run)
    if progress is None and store.get(manifest_key(args.run)) is None:
        print(f"{cli} cancel: no run {args.run!r} in {store.url}", file=sys.stderr)
        return 1
    phase = (progress or {}).get("phase")
    if phase == "Succeeded":
        print(f"run {args.run} already succeeded: nothing to cancel")
        return 0
    if cancelled(store, args.run) is not None:
        print(f"run {args.run} was already cancelled")
        return 0
    cancel = {"by": args.by or getpass.getuser(), "at": time.time(), **({"reason": args.reason} if args.reason else {})}
    store.put(cancel_key(args.run), json.dumps(cancel).encode())
    running = runner(store, args.run)
    if running is None:  # nothing runs it now: mark it here
        mark_cancelled(store, args.run, cancel)
        print(f"cancelled run {args.run} (it was not running: {phase or 'not started'}); {cli} run never resumes it")
        return 0
    if running["host"] != socket.gethostname():
        print(
            f"cancelled run {args.run}: tether run (pid {running['pid']}) runs it on {running['host']}, not here; "
            "it stops before its next attempt and says Cancelled"
        )
        return 0
    os.kill(running["pid"], signal.SIGTERM)  # tether run passes it on: a clean stop of the attempt
    print(f"stopping tether run (pid {running['pid']}): tool calls already running finish and are recorded ...", flush=True)
    deadline = time.monotonic() + args.wait
    while runner(store, args.run) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    if runner(store, args.run) is not None:
        print(
            f"{cli} cancel: tether run (pid {running['pid']}) has not stopped after {args.wait:g}s; it is marked cancelled", file=sys.stderr
        )
        return 1
    print(f"cancelled run {args.run}; {cli} run never resumes it")
    return 0
