"""Cold journal load of a 200-step run, local store and S3 with 20 ms per request, beside LangGraph's
SqliteSaver loading the checkpoint of a 200-message thread.

    $(scripts/env.sh langgraph)/bin/python benchmarks/journal_load.py [--steps 200] [--repeat 7] [--s3-latency 0.02]

A journal of ``--steps`` records (1.5 kB model answers) is written by one attempt, then loaded by
a new ``Journal`` (what a retry does first: read every record, claim the attempt number) in two
states: the attempt ended (``closed``: its closing pack holds every record) and the attempt was
killed (``crashed``) between two pack writes (the records after the last background pack are in
the tail only). Both read the pack and the tail at known keys, no listing; each timed ``crashed``
load is itself an attempt killed after one more step, so the next load meets the same state.
On S3 the store client is built beforehand (a process pays that once, see replay_cost.py); every
S3 request waits ``--s3-latency`` before it is sent (a botocore hook, the request still goes to the
moto server over HTTP). The peer: ``SqliteSaver.get_tuple`` of a thread whose checkpoint holds
``--steps`` messages, on a local file (SQLite has no remote form). Goals: ≤ 20 ms locally, ≤ 100 ms
on S3 at 20 ms per request. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.record_overhead import s3_with_latency  # noqa: E402
from benchmarks.results import save  # noqa: E402


def write_journal(store, scope: str, steps: int, *, crash: bool) -> None:
    from tether.journal import PACK_EVERY, Journal, Record

    journal = Journal(store, scope).load()
    for i in range(steps):
        journal.append_next(Record("model", f"fp{i % 7}", 0, "ok", {"messages": [i]}, body=b"x" * 1500))
    if crash:  # killed after the last background pack: PACK_EVERY - 1 records are loose only
        packer = journal._packer
        if packer is not None:
            packer.join(30)
        for i in range(PACK_EVERY - 1):
            journal.append_next(Record("tool", f"t{i}", 1, "ok", {"i": i}, body=b"1"))
    else:
        journal.close()


def time_loads(store, scope: str, repeat: int, expected: int, *, close: bool) -> float:
    from tether.journal import Journal, Record

    times = []
    for i in range(repeat):
        lists = count_lists(store)
        started = time.perf_counter()
        journal = Journal(store, scope).load()
        times.append(time.perf_counter() - started)
        assert len(journal.records) == expected, len(journal.records)
        assert lists() == 0, "the load listed the journal"
        if close:  # ended cleanly again
            journal.close()
        else:  # killed again, after one more step (and a pack its load began: a dead attempt writes nothing more)
            journal.append(Record("tool", f"again{i}", 1, "ok", {"i": i}, body=b"1"))
            expected += 1
            if journal._packer is not None:
                journal._packer.join(30)
    return round(statistics.median(times) * 1000, 2)


def count_lists(store):
    """A function returning how many listings ``store`` made since this call."""
    before = getattr(store, "lists_made", 0)
    return lambda: getattr(store, "lists_made", 0) - before


def peer_load(path: Path, steps: int, repeat: int) -> float:
    from langchain_core.messages import AIMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    def node(state: MessagesState) -> dict:
        return {"messages": [AIMessage("x" * 1500) for _ in range(steps)]}

    builder = StateGraph(MessagesState)
    builder.add_node("n", node)
    builder.add_edge(START, "n")
    config: RunnableConfig = {"configurable": {"thread_id": "bench"}}
    builder.compile(checkpointer=SqliteSaver(sqlite3.connect(path, check_same_thread=False))).invoke({"messages": []}, config)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))  # cold: a new connection
        found = saver.get_tuple(config)
        times.append(time.perf_counter() - started)
        assert found is not None and len(found.checkpoint["channel_values"]["messages"]) == steps
    return round(statistics.median(times) * 1000, 2)


def counting(store):
    """``store`` counting its listings in ``store.lists_made`` (the loads must make none)."""
    listing = store.list
    store.lists_made = 0

    def counted(prefix):
        store.lists_made += 1
        return listing(prefix)

    store.list = counted
    return store


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--s3-latency", type=float, default=0.02)
    args = p.parse_args()
    from tether.journal import PACK_EVERY
    from tether.stores import LocalStore

    work = Path(tempfile.mkdtemp(prefix="tether-load-"))
    figures: dict = {"steps": args.steps, "repeat": args.repeat, "s3_latency_s": args.s3_latency}
    with ExitStack() as stack:
        stores = {"local": counting(LocalStore(work / "store")), "s3": counting(s3_with_latency(stack, args.s3_latency))}
        for name, store in stores.items():
            row = {}
            for state, crash in (("closed", False), ("crashed", True)):
                scope = f"{state}-{args.steps}"
                write_journal(store, scope, args.steps, crash=crash)
                expected = args.steps + (PACK_EVERY - 1 if crash else 0)
                row[f"{state}_ms"] = time_loads(store, scope, args.repeat, expected, close=not crash)
            figures[name] = row
    figures["peer_sqlite_ms"] = peer_load(work / "peer.sqlite", args.steps, args.repeat)
    f = figures
    print(f"cold load of a {args.steps}-step journal, median of {args.repeat} (ms)")
    print(
        f"  local store:   attempt ended {f['local']['closed_ms']:.2f}, killed between packs {f['local']['crashed_ms']:.2f}   (goal ≤ 20; no listing in either)"
    )
    print(
        f"  S3 +{args.s3_latency * 1000:.0f} ms/req: attempt ended {f['s3']['closed_ms']:.2f}, killed between packs {f['s3']['crashed_ms']:.2f}   (goal ≤ 100)"
    )
    print(f"  peer: SqliteSaver.get_tuple of a {args.steps}-message thread, local file: {f['peer_sqlite_ms']:.2f}")
    save("journal_load", figures)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
