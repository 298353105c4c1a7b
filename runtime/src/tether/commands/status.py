"""``tether status RUN [--store URL] [--json]``: a run's progress, steps, usage and approvals."""

from __future__ import annotations

import argparse
import json

from ..progress import read_progress, unknown_cost_note
from ..stores import open_store


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tether status")
    p.add_argument("run")
    p.add_argument("--store", default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    progress = read_progress(open_store(args.store), args.run)
    if progress is None:
        print(f"no run {args.run!r} in the store")
        return 1
    if args.json:
        print(json.dumps(progress, indent=2))
        return 0
    s, u = progress["steps"], progress["usage"]
    print(f"run {args.run}: {progress['phase']} (attempt {progress['attempt']})")
    print(f"  model turns {s['modelLive']} live / {s['modelReplayed']} replayed; tools {s['toolLive']} live / {s['toolReplayed']} replayed")
    print(
        f"  tokens {u['inputTokens'] + u['outputTokens'] + u['cachedInputTokens'] + u['cacheWriteTokens']}; cost ${u['liveCostUSD']:.6f} live, ${u['savedUSD']:.6f} saved by replay{unknown_cost_note(u)}"
    )
    for a in progress["approvals"]:
        print(f"  approval {a['id']} {a['decision'] or 'pending'}: {a['prompt']}")
    if progress.get("result"):
        print(f"  result: {progress['result']}")
    return 0
