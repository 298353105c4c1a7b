"""``tether logs RUN [--attempt N] [--follow] [--store URL]``: an attempt's step lines.

Every attempt (``tether exec``, under ``tether run`` or an executor) keeps the step lines it
prints in the store, one log per attempt, ending with how the attempt ended; this prints the
latest attempt's, or attempt N's. ``--follow`` prints lines as they come until the attempt ends
(and waits for a run's first attempt to log its first step).

On Kubernetes (RUN is ``NAMESPACE/NAME``) an attempt's step lines are its runner pod's log (the
runtime container prints each step), which the apiserver serves: ``kubectl logs``, as printed.
(The store keeps them too, under the AgentRun's uid, for whoever may read the operator's store.)

A run made in your own process (``run_agent``) prints no step lines; each of its attempts leaves
its record when it ends (``tether.contract.attempt_log_key``), which is shown in the same form."""

from __future__ import annotations

import json
import sys
import time

from ..contract import RUN_LABEL, STEP_LINES_END, attempt_log_key, attempt_of_step_lines_key, step_lines_key, step_lines_prefix
from ..progress import read_progress, step_text
from ..stores import Store, open_store
from . import agentrun_refused, command_name, parser, store_option
from .run import runner

#: Phases after which no attempt runs until someone acts (a follower stops waiting for a log).
_AT_REST = ("Succeeded", "Failed", "AwaitingApproval", "Interrupted", "Cancelled")

#: Where an AgentRun's (``NAMESPACE/NAME``) step lines are read instead.
_AGENTRUN = (
    "an AgentRun's attempts print their step lines to their runner pods' logs; the apiserver serves them:\n"
    f"  kubectl logs -n {{namespace}} -l {RUN_LABEL}={{name}} -c runtime --prefix --tail=-1"
)


def main(argv: list[str]) -> int:
    p = parser("logs", __doc__.split("\n\n")[0])
    p.add_argument("run", help="a run id (the name `tether run` used), or NAMESPACE/NAME of an AgentRun on Kubernetes")
    p.add_argument("--attempt", type=int, default=None, metavar="N", help="that attempt's lines (default: the latest attempt's)")
    p.add_argument("-f", "--follow", action="store_true", help="print new lines as they come, until the attempt ends")
    store_option(p)
    p.add_argument("--interval", type=float, default=0.5, metavar="SECONDS", help="how often --follow reads the store (default 0.5)")
    args = p.parse_args(argv)
    if agentrun_refused("logs", args.run, _AGENTRUN):
        return 2
    store = open_store(args.store)
    attempt = args.attempt or _latest(store, args.run)
    while attempt is None and args.follow and _phase(store, args.run) not in _AT_REST:
        time.sleep(args.interval)  # the run's first attempt has not logged a step yet
        attempt = _latest(store, args.run)
    if attempt is None or (not args.follow and store.get(step_lines_key(args.run, attempt)) is None):
        recorded = _recorded(store, args.run, args.attempt or (read_progress(store, args.run) or {}).get("attempt"))
        if recorded is not None:
            sys.stdout.write(recorded)
            return 0
        return _none(store, args.run, args.attempt)
    printed, over = 0, False
    while True:
        data = store.get(step_lines_key(args.run, attempt)) or b""
        text = data.decode(errors="replace")
        if len(text) > printed:
            sys.stdout.write(text[printed:])
            sys.stdout.flush()
            printed = len(text)
        if not args.follow or STEP_LINES_END in text:
            return 0
        # An attempt that was killed never writes its last line: it is over once a later attempt
        # logs, or the run is at rest and no tether run runs it (then what it wrote last is read
        # once more). An attempt says its run is at rest before its process writes its last lines:
        # while the tether run that ran it is there, they may still come.
        if over or (_latest(store, args.run) or 0) > attempt or (_phase(store, args.run) in _AT_REST and runner(store, args.run) is None):
            if over:
                return 0 if data else _none(store, args.run, attempt)
            over = True
            continue
        time.sleep(args.interval)


def _recorded(store: Store, run_id: str, attempt: int | None) -> str | None:
    """An attempt's step lines rebuilt from its record (a run made by ``run_agent``), or None."""
    data = store.get(attempt_log_key(run_id, attempt)) if attempt else None
    try:
        log = json.loads(data) if data is not None else None
    except ValueError:
        return None
    if not isinstance(log, dict):
        return None
    lines = [
        step_text(
            i, e.get("kind", ""), e.get("name", ""), e.get("mode", ""), e.get("tokens") or 0, e.get("costUSD") or 0.0, e.get("outcome", "")
        )
        for i, e in enumerate(log.get("events") or [], 1)
    ]
    phase = (log.get("progress") or {}).get("phase") or "unknown"
    return "".join(line + "\n" for line in [*lines, STEP_LINES_END + phase.lower()])


def _latest(store: Store, run_id: str) -> int | None:
    attempts = [n for k in store.list(step_lines_prefix(run_id)) if (n := attempt_of_step_lines_key(k)) is not None]
    return max(attempts, default=None)


def _phase(store: Store, run_id: str) -> str | None:
    return (read_progress(store, run_id) or {}).get("phase")


def _none(store: Store, run_id: str, attempt: int | None) -> int:
    progress = read_progress(store, run_id)
    if progress is None:
        print(f"no run {run_id!r} in {store.url}", file=sys.stderr)
        return 1
    which = f"attempt {attempt} of run {run_id!r} logged nothing" if attempt else f"no attempt of run {run_id!r} logged a step"
    state = f"{progress.get('phase') or 'not started'}, attempt {progress.get('attempt') or 0}"
    error = f": {progress['error']}" if progress.get("error") else ""
    print(f"{which} (the run: {state}{error}; {command_name()} status {run_id})", file=sys.stderr)
    return 1
