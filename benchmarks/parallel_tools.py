"""Parallel tool calls: one turn with N parallel 1 s tools, through Tether vs plain LangGraph.

    $(scripts/env.sh langgraph)/bin/python benchmarks/parallel_tools.py [--n 2,4,8] [--seconds 1.0] [--repeat 3]

The model's first turn asks for N tool calls at once; each tool waits ``--seconds`` (async:
``asyncio.sleep``; sync: ``time.sleep``, a blocking client); the second turn answers. The same
LangGraph graph (``agent`` ⇄ ``ToolNode``, tether_langgraph's ``agent_graph``) runs two ways in
the same process, against the same fake provider:

- ``plain``: LangGraph alone — ``ChatOpenAI`` straight to the provider, plain LangChain tools;
- ``tether``: ``tether_langgraph.run_agent`` — every model turn and tool call through the seams,
  recorded durably in a local store (a new run id each time, so everything runs live).

Runs are interleaved (plain, tether, tether, plain, ...) and medians compared. ``turn_s`` is the
run's wall time (two model calls and the tools); ``tools_s`` the time from the first tool's start
to the last tool's end. Goal: ``tools_s`` ≈ ``--seconds`` for every N, i.e. the calls overlap.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from benchmarks.results import save  # noqa: E402
from tether import tool  # noqa: E402
from tether.testing import FakeProvider, Script  # noqa: E402
from tether.wire.providers import PROVIDERS  # noqa: E402
from tether_langgraph import agent_graph  # noqa: E402
from tether_langgraph import run_agent as tether_run_agent  # noqa: E402

MODEL = "gpt-4o-mini"
KINDS = ("async", "sync")


class Clock:
    """Start and end of every tool execution in one run."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    def add(self, start: float) -> None:
        with self.lock:
            self.spans.append((start, time.perf_counter()))

    def tools_s(self, n: int) -> float:
        assert len(self.spans) == n, f"{len(self.spans)} tool executions, expected {n}"
        return max(e for _, e in self.spans) - min(s for s, _ in self.spans)


def tools_for(seconds: float) -> tuple[dict, Clock]:
    clock = Clock()

    async def wait_async(i: int) -> str:
        """Wait, then answer (async)."""
        start = time.perf_counter()
        await asyncio.sleep(seconds)
        clock.add(start)
        return f"done {i}"

    def wait_sync(i: int) -> str:
        """Wait, then answer (sync, blocking)."""
        start = time.perf_counter()
        time.sleep(seconds)
        clock.add(start)
        return f"done {i}"

    return {"async": wait_async, "sync": wait_sync}, clock


def script(ns: list[int]) -> Script:
    conversations = [
        {
            "match": f"[{kind} x{n}]",
            "turns": [
                {"tool_calls": [{"name": f"wait_{kind}", "arguments": {"i": i}} for i in range(n)]},
                {"text_from_tool_results": True, "text": "Results:"},
            ],
        }
        for kind in KINDS
        for n in ns
    ]
    return Script.from_dict({"conversations": conversations})


async def plain(provider: FakeProvider, kind: str, n: int, seconds: float) -> tuple[float, float]:
    fns, clock = tools_for(seconds)
    fn = fns[kind]
    start = time.perf_counter()  # from building the agent, as run_agent does
    lc_tool = StructuredTool.from_function(coroutine=fn) if kind == "async" else StructuredTool.from_function(func=fn)
    model = ChatOpenAI(model=MODEL, base_url=provider.base_url("openai"), api_key="sk-bench", max_retries=0)
    graph = agent_graph(model, [lc_tool])
    state = await graph.ainvoke({"messages": [HumanMessage(f"[{kind} x{n}] go")]})
    turn = time.perf_counter() - start
    assert f"done {n - 1}" in state["messages"][-1].text
    return turn, clock.tools_s(n)


async def through_tether(provider: FakeProvider, kind: str, n: int, seconds: float, store: str) -> tuple[float, float]:
    fns, clock = tools_for(seconds)
    start = time.perf_counter()
    result = await tether_run_agent(
        f"[{kind} x{n}] go",
        model=MODEL,
        tools=[tool(fns[kind])],
        run_id=f"parallel-{uuid.uuid4().hex}",
        store=store,
        upstreams={p: f"{provider.url}/{p}" for p in PROVIDERS},
    )
    turn = time.perf_counter() - start
    assert result.status == "succeeded" and result.tool_live == n and f"done {n - 1}" in (result.output or ""), result
    return turn, clock.tools_s(n)


async def measure(provider: FakeProvider, ns: list[int], seconds: float, repeat: int, store: str) -> dict:
    await plain(provider, "async", 1, 0.0)  # warm: connections, lazy imports
    await through_tether(provider, "async", 1, 0.0, store)
    times: dict = {kind: {n: {"plain": [], "tether": []} for n in ns} for kind in KINDS}
    for r in range(repeat):
        for kind in KINDS:
            for n in ns:
                ways = ("plain", "tether") if r % 2 == 0 else ("tether", "plain")
                for way in ways:
                    got = await (plain(provider, kind, n, seconds) if way == "plain" else through_tether(provider, kind, n, seconds, store))
                    times[kind][n][way].append(got)
    out: dict = {}
    for kind in KINDS:
        out[kind] = {}
        for n in ns:
            row = {}
            for way in ("plain", "tether"):
                row[f"{way}_turn_s"] = round(statistics.median(t for t, _ in times[kind][n][way]), 3)
                row[f"{way}_tools_s"] = round(statistics.median(s for _, s in times[kind][n][way]), 3)
            row["turn_ratio"] = round(row["tether_turn_s"] / row["plain_turn_s"], 3)
            row["tools_ratio"] = round(row["tether_tools_s"] / row["plain_tools_s"], 3)
            out[kind][str(n)] = row
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", default="2,4,8", help="parallel tool calls per turn, comma-separated")
    p.add_argument("--seconds", type=float, default=1.0, help="how long each tool waits")
    p.add_argument("--repeat", type=int, default=3, help="runs per way, N and kind (medians)")
    args = p.parse_args()
    ns = [int(x) for x in args.n.split(",")]
    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")  # any key: the fake provider answers

    with tempfile.TemporaryDirectory(prefix="tether-parallel-") as tmp, FakeProvider(script(sorted({1, *ns}))) as provider:
        rows = asyncio.run(measure(provider, ns, args.seconds, args.repeat, str(Path(tmp) / "store")))
    figures = {"seconds": args.seconds, "repeat": args.repeat, **rows}
    print(f"one turn with N parallel {args.seconds:g} s tools, LangGraph ToolNode; medians of {args.repeat} interleaved runs")
    print(f"  {'tools':<7}{'N':>3}{'plain turn':>12}{'tether turn':>13}{'ratio':>8}{'plain tools':>13}{'tether tools':>14}{'ratio':>8}")
    for kind in KINDS:
        for n in ns:
            f = rows[kind][str(n)]
            print(
                f"  {kind:<7}{n:>3}{f['plain_turn_s']:>11.2f}s{f['tether_turn_s']:>12.2f}s{f['turn_ratio']:>8.3f}"
                f"{f['plain_tools_s']:>12.2f}s{f['tether_tools_s']:>13.2f}s{f['tools_ratio']:>8.3f}"
            )
    save("parallel_tools", figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
