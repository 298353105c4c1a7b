"""``tether list [--store URL] [--json]``: the runs in a store, newest first, with their phase,
attempt, steps (live / replayed) and live cost, as their progress records say."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ..contract import run_of_progress_key, runs_prefix
from ..progress import read_progress
from ..stores import open_store
from . import parser, store_option


def main(argv: list[str]) -> int:
    p = parser("list", __doc__.split("\n\n")[0])
    store_option(p)
    p.add_argument("--json", action="store_true", help="one JSON document: a list of the runs' progress records")
    args = p.parse_args(argv)
    store = open_store(args.store)
    runs = []
    for key in store.list(runs_prefix()):
        if run_id := run_of_progress_key(key):
            runs.append({"run": run_id, **(read_progress(store, run_id) or {})})
    runs.sort(key=lambda r: r.get("updatedAt") or 0, reverse=True)
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    if not runs:
        print(f"no runs in {store.url}")
        return 0
    print(f"{'RUN':<32} {'PHASE':<17} {'ATTEMPT':>7} {'TURNS(live/replayed)':>21} {'COST(live)':>11}  UPDATED")
    for r in runs:
        steps, usage = r.get("steps") or {}, r.get("usage") or {}
        turns = f"{steps.get('modelLive', 0)}/{steps.get('modelReplayed', 0)}"
        cost = usage.get("runLiveCostUSD", usage.get("liveCostUSD", 0.0))
        updated = r.get("updatedAt")
        when = datetime.fromtimestamp(updated, UTC).strftime("%Y-%m-%d %H:%M:%S") if isinstance(updated, (int, float)) else "-"
        dollars = f"${cost:.6f}"
        print(f"{r['run']:<32} {r.get('phase') or '-':<17} {r.get('attempt', 0):>7} {turns:>21} {dollars:>11}  {when}")
    return 0
