"""Overhead of a journaled MCP tool call (issue 26): through Tether vs straight to the server, beside
the same figure for a Tether tool.

    python benchmarks/mcp_overhead.py [--calls 200] [--block 10] [--no-fsync]

MCP: the official Python SDK's client (``mcp.Client``) calls ``charge`` on a server built with the
same SDK (tests/support/mcp_ledger.py, Streamable HTTP, its own process) three ways, in interleaved
blocks of ``--block`` calls so drift in the machine's load hits all alike: straight to the server;
through ``tether.mcp_url`` inside a run with ``tether.mcp_http_client()`` (``mcp``: served in the
client's task, what a Python MCP client does); and through the same URL with the SDK's own HTTP
client (``mcp_proxy``: the loopback proxy, what a client in another process, e.g. the Claude CLI,
goes through). Journaled, every call is a new tool step, live, recorded in a local store before
its answer is handed back. Each call has new arguments, so none replays. Medians per call;
``overhead_ms`` is the difference from direct.

Tether tool: the same for an async tool that returns at once, called through the tool seam
(``tether.tools.call_tool``, live and recorded) vs awaited directly.

Both recorded ways write one record per call to the local store, which fsyncs it (a record must
survive a node crash): the run's journal tail, its one copy in every run (``run_agent`` runs
``Run(overlap_writes=True)``); ``--no-fsync`` shows what that costs. Goal: ``overhead_ms`` ≤ 2 for MCP (in process). The
last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

import tether  # noqa: E402
from benchmarks.results import save  # noqa: E402
from tests.support.mcp_ledger import charges, http_server  # noqa: E402
from tether import mcp  # noqa: E402
from tether.run import Run  # noqa: E402
from tether.stores import LocalStore  # noqa: E402
from tether.tools import ToolSpec, call_tool  # noqa: E402


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


async def timed(calls: list[Any]) -> list[float]:
    out = []
    for call in calls:
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)
    return out


async def measure_mcp(url: str, run: Run, calls: int, block: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(in process, through the proxy)``, each beside the same direct calls."""
    samples: dict[str, list[float]] = {"direct": [], "in_process": [], "proxy": []}
    n = 0
    with run.activate():
        through = tether.mcp_url(url, name="bench")
        async with (
            Client(url) as plain,
            Client(streamable_http_client(through, http_client=tether.mcp_http_client())) as in_process,
            Client(through) as proxied,
        ):
            ways = {"direct": plain, "in_process": in_process, "proxy": proxied}
            for way, client in ways.items():  # warm every path (connections, the SDK's first-call work)
                await client.call_tool("charge", {"customer": "warm", "amount": len(way)})
            while len(samples["direct"]) < calls:
                for way, client in ways.items():

                    def one(client: Client = client) -> Any:
                        nonlocal n
                        n += 1
                        return client.call_tool("charge", {"customer": "bench", "amount": n})

                    samples[way] += await timed([one] * block)
    direct = median_ms(samples["direct"])

    def figures(way: str) -> dict[str, Any]:
        journaled = median_ms(samples[way])
        return {"direct_ms": direct, "journaled_ms": journaled, "overhead_ms": round(journaled - direct, 3)}

    return figures("in_process"), figures("proxy")


async def measure_tool(run: Run, calls: int, block: int) -> dict[str, Any]:
    async def noop(n: int) -> str:
        return f"ok {n}"

    spec = ToolSpec(name="noop", fn=noop)
    direct: list[float] = []
    journaled: list[float] = []
    n = 0
    while len(direct) < calls:

        def plain() -> Any:
            nonlocal n
            n += 1
            return noop(n)

        def seam() -> Any:
            nonlocal n
            n += 1
            return call_tool(spec, {"n": n}, run=run)

        direct += await timed([plain] * block)
        journaled += await timed([seam] * block)
    return {
        "direct_ms": median_ms(direct),
        "journaled_ms": median_ms(journaled),
        "overhead_ms": round(median_ms(journaled) - median_ms(direct), 3),
    }


async def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=200, help="calls per way")
    p.add_argument("--block", type=int, default=10, help="calls per block (blocks interleave the two ways)")
    p.add_argument("--no-fsync", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp) / "store", fsync=not args.no_fsync)
        ledger = Path(tmp) / "ledger.jsonl"
        with http_server(ledger) as server:
            run = Run("mcp-bench", store, overlap_writes=True)  # as every run_agent run (tether.agent.runner): the tail is the one copy
            mcp.serve(run)
            try:
                figures_mcp, figures_proxy = await measure_mcp(server.url, run, args.calls, args.block)
                figures_tool = await measure_tool(run, args.calls, args.block)
            finally:
                await run.aclose()
        executed = len(charges(ledger))
    expected = 3 + 3 * ((args.calls + args.block - 1) // args.block) * args.block
    assert executed == expected, f"the server ran {executed} calls, expected {expected}: every call must be live"
    figures = {
        "calls": args.calls,
        "block": args.block,
        "fsync": not args.no_fsync,
        "mcp": figures_mcp,
        "mcp_proxy": figures_proxy,
        "tether_tool": figures_tool,
    }
    print(
        f"MCP tools/call, SDK client → SDK server over Streamable HTTP: direct {figures_mcp['direct_ms']} ms, "
        f"journaled in process {figures_mcp['journaled_ms']} ms (overhead {figures_mcp['overhead_ms']} ms per call), "
        f"through the proxy {figures_proxy['journaled_ms']} ms (overhead {figures_proxy['overhead_ms']} ms)"
    )
    print(
        f"Tether tool (async, returns at once): direct {figures_tool['direct_ms']} ms, journaled {figures_tool['journaled_ms']} ms, "
        f"overhead {figures_tool['overhead_ms']} ms per call"
    )
    save("mcp_overhead" if not args.no_fsync else "mcp_overhead-no-fsync", figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
