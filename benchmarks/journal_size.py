"""Bytes stored for a run of 20, 200 and 1,000 turns: Tether's journal beside LangGraph's
SqliteSaver and Pydantic AI's DBOS integration (issue 27, item 8).

    $(scripts/env.sh langgraph)/bin/python benchmarks/journal_size.py [--turns 20,200,1000] [--no-dbos]

One ReAct agent, one tool (``lookup``, a 100-character answer); the fake provider asks for one
tool call per turn and answers in text at the last one: ``n`` model turns and ``n - 1`` tool
calls. Each run is on a fresh store (a local directory, a SQLite file), fsync off where it can be
(size, not speed, is measured), run to its end:

- **tether (langgraph)**: ``tether_langgraph.run_agent`` (its ReAct graph), the run's journal
  (``journal/<run>/``: pack, tail, loose records, attempt markers).
- **LangGraph + SqliteSaver**: the same graph shape (``agent`` ⇄ ``ToolNode``, ``ChatOpenAI``) with
  langgraph-checkpoint-sqlite's saver on a file: the file (and its ``-wal``, if any) at the end.
  Up to ``--saver-max`` turns (200): every checkpoint holds the whole conversation, so its file
  grows with the square of the turns (51 MB at 200 turns; 1,000 would take ~1.3 GB and half an
  hour here).
- **tether (pydantic-ai)** and **Pydantic AI + DBOS**: in the pydantic-ai environment (DBOS is
  pinned there, ``scripts/env.sh pydantic-ai``), one Pydantic AI agent run by
  ``tether_pydantic_ai.run_agent`` and by ``pydantic_ai.durable_exec.dbos.DBOSAgent`` with DBOS's
  system database on SQLite: the journal, and the database file at the end. Up to
  ``--pydantic-max`` turns (default: all; on a loaded 2-core machine the 1,000-turn runs took
  30 minutes for the LangGraph adapter and more than 40 for this side).

Printed: the bytes of each run, the bytes a turn added between two run lengths (20 → 200, 200 →
1,000: a store's fixed cost, such as the pages of SQLite's schema, cancels out), and ``growth``,
the last of those over the first (1.0: a turn costs the same wherever it is; a store that keeps
the whole conversation at every turn grows with the turns, ×5.6 from 20 → 200 to 200 → 1,000).
Goal: Tether's growth ≤ 1.2. Last line: JSON.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import save  # noqa: E402

QUESTION = "Look up every topic, one at a time."
ANSWER = "x" * 80


def script(turns: int) -> dict[str, Any]:
    calls = [{"tool_calls": [{"name": "lookup", "arguments": {"topic": f"topic {i}"}}]} for i in range(turns - 1)]
    return {"conversations": [{"match": "", "turns": [*calls, {"text": "Done."}]}]}


def lookup(topic: str) -> str:
    """Look a topic up in the knowledge base."""
    return f"{topic}: {ANSWER}"


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))


def file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())  # the db, its -wal, -shm, -journal


def tether_langgraph(upstream: str, work: Path, turns: int) -> int:
    from tether.stores import LocalStore
    from tether_langgraph import run_agent_sync, tool

    store = LocalStore(work / "tether-langgraph", fsync=False)
    result = run_agent_sync(
        QUESTION,
        tools=[tool(lookup)],
        model="gpt-4o-mini",
        run_id=f"r{turns}",
        store=store,
        upstreams={"openai": upstream},
        max_turns=turns + 2,
    )
    assert result.output == "Done." and result.model_live == turns, result
    return folder_bytes(work / "tether-langgraph" / "journal" / f"r{turns}")


def sqlite_saver(upstream: str, work: Path, turns: int) -> int:
    db = work / f"sqlite-saver-{turns}.db"
    conn = sqlite3.connect(db, check_same_thread=False)
    conn.execute("PRAGMA synchronous=OFF")
    react_graph_run(upstream, conn, turns)
    conn.close()
    return file_bytes(db)


def react_graph_run(upstream: str, saver_db: sqlite3.Connection | None, turns: int) -> None:
    """LangGraph's ReAct graph (model node, ToolNode) run to its answer: checkpointed by
    ``SqliteSaver`` on ``saver_db``, or with no checkpointer at all."""
    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    tools = [tool(lookup)]
    model = ChatOpenAI(model="gpt-4o-mini", base_url=upstream + "/v1", api_key="sk-bench", max_retries=0).bind_tools(tools)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=SqliteSaver(saver_db) if saver_db is not None else None)
    config: RunnableConfig = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * turns + 5}
    out = graph.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    assert out["messages"][-1].content == "Done.", out["messages"][-1]


PYDANTIC_CHILD = """
import asyncio, json, sys
from pathlib import Path
sys.path.insert(0, ROOT)
from benchmarks.journal_size import folder_bytes, file_bytes, lookup, QUESTION

def tether(turns):
    from tether.stores import LocalStore
    from tether_pydantic_ai import run_agent_sync, tool
    store = LocalStore(Path(WORK) / "tether-pydantic-ai", fsync=False)
    result = run_agent_sync(QUESTION, tools=[tool(lookup)], model="openai:gpt-4o-mini", run_id=f"r{turns}", store=store, upstreams={"openai": UPSTREAM}, max_turns=turns + 2)
    assert result.output == "Done." and result.model_live == turns, result
    return folder_bytes(Path(WORK) / "tether-pydantic-ai" / "journal" / f"r{turns}")

def dbos(turns):
    from dbos import DBOS
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits
    db = Path(WORK) / f"dbos-{turns}.sqlite"
    DBOS(config={"name": f"bench{turns}", "system_database_url": f"sqlite:///{db}", "run_admin_server": False})
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(base_url=UPSTREAM + "/v1", api_key="sk-bench"))
    agent = DBOSAgent(Agent(model, tools=[lookup], name=f"bench{turns}"))
    DBOS.launch()
    try:
        result = agent.run_sync(QUESTION, usage_limits=UsageLimits(request_limit=turns + 2))
        assert result.output == "Done.", result.output
    finally:
        DBOS.destroy()
    return file_bytes(db)

print(json.dumps({"tether": tether(TURNS), "dbos": dbos(TURNS) if DBOS_TOO else None}))
"""


def marginal(sizes: list[int], row: dict[str, int]) -> dict[str, Any]:
    """What each turn added between two run lengths (a store's fixed cost, e.g. SQLite's schema
    pages, cancels out), and ``growth``: the last of those over the first (1.0: a turn costs the
    same wherever it is)."""
    steps = {f"{a}-{b}": round((row[str(b)] - row[str(a)]) / (b - a)) for a, b in itertools.pairwise(sizes)}
    values = list(steps.values())
    # A growth needs two intervals: with one (a peer run only up to 200 turns) there is none.
    return {"marginal_bytes_per_turn": steps, "growth": round(values[-1] / values[0], 2) if len(values) > 1 and values[0] > 0 else None}


def pydantic_ai_env() -> Path:
    out = subprocess.run([str(ROOT / "scripts" / "env.sh"), "pydantic-ai"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"


def pydantic_side(python: Path, upstream: str, work: Path, turns: int, dbos: bool) -> dict[str, Any]:
    """One run each in the pydantic-ai environment (a fresh process per size: DBOS is one per process)."""
    names = {"ROOT": str(ROOT), "WORK": str(work), "UPSTREAM": upstream, "TURNS": turns, "DBOS_TOO": dbos}
    prelude = "".join(f"{k} = {v!r}\n" for k, v in names.items())
    proc = subprocess.run(
        [str(python), "-c", prelude + PYDANTIC_CHILD],
        capture_output=True,
        text=True,
        cwd=work,
        env={**os.environ, "OPENAI_API_KEY": "sk-bench"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--turns", default="20,200,1000", help="comma-separated run lengths in model turns")
    p.add_argument("--no-dbos", action="store_true", help="skip the pydantic-ai environment (Tether's pydantic-ai adapter and DBOS)")
    p.add_argument("--saver-max", type=int, default=200, help="longest run for SqliteSaver (its file grows with the square of the turns)")
    p.add_argument(
        "--pydantic-max", type=int, default=None, help="longest run for the pydantic-ai side (Tether's adapter and DBOS); default: all"
    )
    args = p.parse_args()
    from tether.testing.fake_provider import FakeProvider
    from tether.testing.script import Script

    os.environ.setdefault("OPENAI_API_KEY", "sk-bench")  # the SDKs want one; the fake provider takes any
    sizes = [int(n) for n in args.turns.split(",")]
    work = Path(tempfile.mkdtemp(prefix="tether-journal-size-"))
    python = None if args.no_dbos else pydantic_ai_env()
    rows: dict[str, dict[str, int]] = {"tether_langgraph": {}, "sqlite_saver": {}}
    if python is not None:
        rows.update(tether_pydantic_ai={}, dbos={})
    for turns in sizes:
        for name in ("tether_langgraph", "sqlite_saver"):
            if name == "sqlite_saver" and turns > args.saver_max:
                continue
            with FakeProvider(Script.from_dict(script(turns))) as fake:
                run = tether_langgraph if name == "tether_langgraph" else sqlite_saver
                rows[name][str(turns)] = run(fake.url + "/openai", work, turns)
        if python is not None and (args.pydantic_max is None or turns <= args.pydantic_max):
            with FakeProvider(Script.from_dict(script(turns))) as fake:
                side = pydantic_side(python, fake.url + "/openai", work, turns, dbos=True)
            rows["tether_pydantic_ai"][str(turns)], rows["dbos"][str(turns)] = side["tether"], side["dbos"]
        print(
            f"{turns:>6} turns: "
            + "  ".join(f"{name} {row[str(turns)] / 1024:,.1f} kB" for name, row in rows.items() if str(turns) in row),
            flush=True,
        )

    figures: dict[str, Any] = {"turns": sizes}
    print(f"\n{'bytes':22}" + "".join(f"{str(n) + ' turns':>14}" for n in sizes) + "   marginal bytes per turn between sizes, growth")
    for name, row in rows.items():
        ran = [n for n in sizes if str(n) in row]
        figures[name] = {"bytes": row, **marginal(ran, row)}
        steps = "  ".join(f"{m:,}" for m in figures[name]["marginal_bytes_per_turn"].values())
        print(
            f"{name:22}"
            + "".join(f"{row[str(n)]:>14,}" if str(n) in row else f"{'not run':>14}" for n in sizes)
            + f"   {steps}  x{figures[name]['growth']}"
        )
    print(json.dumps(figures))
    save("journal_size", figures)


if __name__ == "__main__":
    main()
