"""A live turn and a tools phase beside LangGraph + SqliteSaver (issue 27, item 7).

    $(scripts/env.sh langgraph)/bin/python benchmarks/peer_turns.py [--turns 20] [--latency 0.1] [--repeat 5]

One ReAct graph (``agent`` ⇄ ``ToolNode``, ``ChatOpenAI``, one tool answering at once); the fake
provider, in its own process as a real provider is, answers after ``--latency`` seconds and asks
for one tool call per turn until the last: ``--turns`` model turns, ``--turns - 1`` tools phases.
Three ways, interleaved ``--repeat`` times in this process (each on a fresh store):

- **langgraph**: the graph without a checkpointer (nothing durable: the floor);
- **sqlite_saver**: the graph with langgraph-checkpoint-sqlite's ``SqliteSaver`` on a file
  (SQLite's defaults: a synced write per checkpoint);
- **tether**: ``tether_langgraph.run_agent`` on the local store (its ReAct graph, every turn and
  tool call recorded, fsync on), as ``tether run`` does it; and **tether_not_durable**, the same
  with ``durable=False`` (the adapter's graph, nothing recorded: what the adapter costs apart
  from recording); and **tether_no_fsync**, everything recorded on a store that does not sync
  (what the two synced writes a turn costs: the answer's before its tool runs, the tool's before
  its result is handed back; SqliteSaver writes beside the next step instead).

Per way, the median over the repeats of: ``turn_ms``, the run's wall time over its turns;
``tools_phase_ms``, as the model sees it: from the provider's answer asking for a tool to the next
request reaching it (the provider's ledger times each request's arrival; the answer left
``--latency`` after the previous one arrived), median over the run's phases; and
``cpu_ms_per_turn``, this process's CPU time (all its threads; the provider runs apart) over the
run's turns — on a shared machine the wall-time figures move with the load, the CPU less. Printed beside
sqlite_saver: the difference in ms and the ratio. Goal: tether ≤ sqlite_saver + 1 ms per turn and
per tools phase. Last line: JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.journal_size import QUESTION, lookup, react_graph_run, script  # noqa: E402
from benchmarks.results import save  # noqa: E402


def langgraph_run(upstream: str, db: Path | None, turns: int) -> None:
    saver_db = sqlite3.connect(db, check_same_thread=False) if db is not None else None
    react_graph_run(upstream, saver_db, turns)


def tether_run(upstream: str, store: Path, turns: int, durable: bool = True, fsync: bool = True) -> None:
    from tether.stores import LocalStore
    from tether_langgraph import run_agent_sync, tool

    upstreams = {"openai": upstream}
    result = run_agent_sync(
        QUESTION,
        tools=[tool(lookup)],
        model="gpt-4o-mini",
        run_id="bench",
        store=str(store) if fsync else LocalStore(store, fsync=False),
        upstreams=upstreams,
        max_turns=turns + 2,
        durable=durable,
    )
    assert result.output == "Done." and (result.model_live == turns or not durable), result


def ledger_times(path: Path, since: int) -> list[float]:
    lines = path.read_text().splitlines()[since:] if path.exists() else []
    return [json.loads(line)["time"] for line in lines]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--latency", type=float, default=0.1)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")
    import subprocess

    work = Path(tempfile.mkdtemp(prefix="tether-peer-turns-"))
    (work / "script.json").write_text(json.dumps(script(args.turns)))
    ledger = work / "ledger.jsonl"
    command = [
        sys.executable,
        "-m",
        "tether.testing.fake_provider",
        "--script",
        str(work / "script.json"),
        "--latency",
        str(args.latency),
        "--ledger",
        str(ledger),
    ]
    ways: dict[str, Callable[[str, Path], None]] = {
        "langgraph": lambda up, d: langgraph_run(up, None, args.turns),
        "sqlite_saver": lambda up, d: langgraph_run(up, d / "saver.db", args.turns),
        "tether_not_durable": lambda up, d: tether_run(up, d / "store", args.turns, durable=False),
        "tether": lambda up, d: tether_run(up, d / "store", args.turns),
        "tether_no_fsync": lambda up, d: tether_run(up, d / "store", args.turns, fsync=False),
    }
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as provider:
        try:
            line = provider.stdout.readline() if provider.stdout else ""
            assert line.startswith("READY "), line
            upstream = line.split()[1] + "/openai"
            for way in ways.values():  # a warm-up run each: imports, first connections
                way(upstream, Path(tempfile.mkdtemp(dir=work)))
            for _ in range(args.repeat):
                for name, way in ways.items():
                    since = len(ledger.read_text().splitlines()) if ledger.exists() else 0
                    started, cpu = time.perf_counter(), time.process_time()
                    way(upstream, Path(tempfile.mkdtemp(dir=work)))
                    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
                    arrivals = ledger_times(ledger, since)
                    assert len(arrivals) == args.turns, (name, len(arrivals))
                    phases = [1000 * (b - a - args.latency) for a, b in itertools.pairwise(arrivals)]
                    rows[name].append(
                        {
                            "turn_ms": 1000 * wall / args.turns,
                            "tools_phase_ms": statistics.median(phases),
                            "cpu_ms_per_turn": 1000 * cpu / args.turns,
                        }
                    )
        finally:
            provider.terminate()

    figures: dict[str, Any] = {"turns": args.turns, "latency_s": args.latency, "repeat": args.repeat}
    for name, runs in rows.items():
        figures[name] = {key: round(statistics.median(r[key] for r in runs), 2) for key in ("turn_ms", "tools_phase_ms", "cpu_ms_per_turn")}
    peer = figures["sqlite_saver"]
    for name in ("langgraph", "tether_not_durable", "tether", "tether_no_fsync"):
        for key in ("turn_ms", "tools_phase_ms", "cpu_ms_per_turn"):
            figures[name][f"{key}_over_sqlite_saver"] = round(figures[name][key] - peer[key], 2)
        figures[name]["turn_ratio_to_sqlite_saver"] = round(figures[name]["turn_ms"] / peer["turn_ms"], 4)
    print(
        f"{'':20}{'turn ms':>10}{'tools phase ms':>16}{'CPU ms/turn':>13}{'turn − peer':>13}{'phase − peer':>14}{'CPU − peer':>12}{'ratio':>9}"
    )
    for name in ways:
        f = figures[name]
        extra = (
            f"{f.get('turn_ms_over_sqlite_saver', 0):>+13.2f}{f.get('tools_phase_ms_over_sqlite_saver', 0):>+14.2f}"
            f"{f.get('cpu_ms_per_turn_over_sqlite_saver', 0):>+12.2f}{f.get('turn_ratio_to_sqlite_saver', 1):>9.4f}"
        )
        print(f"{name:20}{f['turn_ms']:>10.2f}{f['tools_phase_ms']:>16.2f}{f['cpu_ms_per_turn']:>13.2f}{extra}")
    print(json.dumps(figures))
    save("peer_turns", figures)


if __name__ == "__main__":
    main()
