"""``tether status RUN [--store URL] [--json]``: a run's progress, steps, usage and approvals.

Approvals are read from the store itself, not from the progress document (which the runtime
rewrites only while it runs): a decision shows as soon as it is made."""

from __future__ import annotations

import json

from ..approvals import list_approvals
from ..progress import approval_progress, read_progress, run_spend_note, unknown_cost_note
from ..stores import open_store
from . import parser, store_option


def main(argv: list[str]) -> int:
    p = parser("status", __doc__.split("\n\n")[0])
    p.add_argument("run", help="a run id (the name `tether run` used; `tether list` lists them)")
    store_option(p)
    p.add_argument("--json", action="store_true", help="the progress record as one JSON document, approvals included")
    args = p.parse_args(argv)
    store = open_store(args.store)
    progress = read_progress(store, args.run)
    if progress is None:
        print(f"no run {args.run!r} in the store")
        return 1
    progress["approvals"] = [approval_progress(r).wire() for r in list_approvals(store, args.run)]
    if args.json:
        print(json.dumps(progress, indent=2))
        return 0
    s, u = progress.get("steps") or {}, progress.get("usage") or {}
    print(f"run {args.run}: {progress.get('phase')} (attempt {progress.get('attempt')})")
    print(
        f"  model turns {s.get('modelLive', 0)} live / {s.get('modelReplayed', 0)} replayed; "
        f"tools {s.get('toolLive', 0)} live / {s.get('toolReplayed', 0)} replayed"
    )
    tokens = sum(u.get(k, 0) for k in ("inputTokens", "outputTokens", "cachedInputTokens", "cacheWriteTokens"))
    print(
        f"  last attempt: tokens {tokens}; cost ${u.get('liveCostUSD', 0):.6f} live, "
        f"${u.get('savedUSD', 0):.6f} saved by replay{unknown_cost_note(u)}"
    )
    print(f"  {run_spend_note(u)}")
    for a in progress["approvals"]:
        by = f" by {a['by']}" if a.get("by") else ""
        print(f"  approval {a['id']} {a.get('decision') or 'pending'}{by}: {a.get('prompt')}")
    if progress.get("error"):
        print(f"  error: {progress['error']}")
    if progress.get("result"):
        print(f"  result: {progress['result']}")
    return 0
