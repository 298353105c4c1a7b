"""Start-up beside LangGraph's own SqliteSaver: import time, and a finished run started again.

    $(scripts/env.sh langgraph)/bin/python benchmarks/startup.py [--repeat 5]

The same ReAct graph (``agent`` ⇄ ``ToolNode``, ``ChatOpenAI`` against the fake provider, one
tool; the script asks for the tool, then answers: 2 model turns + 1 tool) run to its end once,
then started again in fresh processes, interleaved, ``--repeat`` times each:

- **peer**: plain LangGraph with ``SqliteSaver`` (langgraph-checkpoint-sqlite, pinned in
  envs/langgraph.in) on a file: build the graph, open the saver, ``invoke(None)`` on the finished
  thread (what resuming a finished run is in LangGraph).
- **tether**: ``tether_langgraph.run_agent`` with the same run id on the local store: store,
  journal load, the adapter's graph, both turns and the tool replayed.

Timed inside each process: the imports (the framework's alone in a third process:
``langgraph.graph``, ``langgraph.prebuilt``, ``langchain_openai``; the peer's with its saver;
ours the framework's first, then ``tether_langgraph``: that second figure is the import time of
tether + adapter beside the framework's) and the work after them, wall and CPU (``process_time``:
less moved by other jobs on the machine than wall time). Also each process's wall time. Goal: ours − the peer's ≤ 100 ms for the finished run. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import save  # noqa: E402

SCRIPT = {
    "conversations": [
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        }
    ]
}
QUESTION = "What is the weather in Paris?"

FRAMEWORK = """
import time
t = time.perf_counter()
import langchain_openai, langgraph.graph, langgraph.prebuilt
print(json_dumps({"import_ms": 1000 * (time.perf_counter() - t), "work_ms": 0.0}))
"""

PEER = """
import time, sys
t = time.perf_counter()
import sqlite3
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
imported = time.perf_counter()
cpu = time.process_time()

@tool
def get_weather(city: str) -> str:
    \"\"\"Current weather in a city.\"\"\"
    return f"Sunny in {city}"

model = ChatOpenAI(model="gpt-4o-mini", base_url=UPSTREAM + "/v1", api_key="sk-bench", max_retries=0).bind_tools([get_weather])

def agent(state):
    return {"messages": [model.invoke(state["messages"])]}

saver = SqliteSaver(sqlite3.connect(DB, check_same_thread=False))
builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode([get_weather]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_edge("tools", "agent")
graph = builder.compile(checkpointer=saver)
config = {"configurable": {"thread_id": "bench"}}
out = graph.invoke({"messages": [("user", QUESTION)]} if FIRST else None, config)
assert out["messages"][-1].content.startswith("Done:"), out["messages"][-1]
print(json_dumps({"import_ms": 1000 * (imported - t), "work_ms": 1000 * (time.perf_counter() - imported), "work_cpu_ms": 1000 * (time.process_time() - cpu)}))
"""

OURS = """
import time
t = time.perf_counter()
import langchain_openai, langgraph.graph, langgraph.prebuilt
framework = time.perf_counter()
from tether_langgraph import run_agent_sync, tool
imported = time.perf_counter()
cpu = time.process_time()

@tool
def get_weather(city: str) -> str:
    \"\"\"Current weather in a city.\"\"\"
    return f"Sunny in {city}"

result = run_agent_sync(QUESTION, tools=[get_weather], model="gpt-4o-mini", run_id="bench", store=STORE, upstreams={"openai": UPSTREAM})
assert result.output.startswith("Done:") and (FIRST or result.model_live == 0), result
print(json_dumps({"import_ms": 1000 * (imported - t), "tether_import_ms": 1000 * (imported - framework), "work_ms": 1000 * (time.perf_counter() - imported), "work_cpu_ms": 1000 * (time.process_time() - cpu), "replay_ms": result.replay_ms}))
"""


def child(code: str, **names: object) -> dict:
    """Run ``code`` in a fresh interpreter of this environment; its JSON line plus its wall time."""
    prelude = "from json import dumps as json_dumps\n" + "".join(f"{k} = {v!r}\n" for k, v in names.items())
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env)
    wall_ms = 1000 * (time.perf_counter() - started)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_ms": wall_ms}


def median(rows: list[dict], key: str) -> float:
    return round(float(statistics.median(r[key] for r in rows)), 1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    from tether.testing.fake_provider import FakeProvider
    from tether.testing.script import Script

    work = Path(tempfile.mkdtemp(prefix="tether-startup-"))
    with FakeProvider(Script.from_dict(SCRIPT)) as fake:
        upstream = fake.url + "/openai"
        common = {"UPSTREAM": upstream, "QUESTION": QUESTION}
        peer_names = {**common, "DB": str(work / "peer.sqlite")}
        ours_names = {**common, "STORE": str(work / "store")}
        child(PEER, FIRST=True, **peer_names)  # both runs to their end once
        child(OURS, FIRST=True, **ours_names)
        live_before = fake.live_calls()
        rows: dict[str, list[dict]] = {"framework": [], "peer": [], "tether": []}
        for _ in range(args.repeat):  # interleaved: the machine's load moves all three alike
            rows["framework"].append(child(FRAMEWORK))
            rows["peer"].append(child(PEER, FIRST=False, **peer_names))
            rows["tether"].append(child(OURS, FIRST=False, **ours_names))
        live_after = fake.live_calls()
    figures: dict = {"repeat": args.repeat, "live_model_calls_when_started_again": live_after - live_before}
    for name, found in rows.items():
        figures[name] = {key: median(found, key) for key in found[0]}
    figures["finished_run_overhead_ms"] = round(figures["tether"]["work_ms"] - figures["peer"]["work_ms"], 1)
    figures["import_overhead_ms"] = round(figures["tether"]["import_ms"] - figures["framework"]["import_ms"], 1)
    figures["finished_run_cpu_overhead_ms"] = round(figures["tether"]["work_cpu_ms"] - figures["peer"]["work_cpu_ms"], 1)
    f = figures
    print(f"medians of {args.repeat} interleaved fresh processes each (ms)")
    print(f"{'':38}{'imports':>10}{'work':>10}{'process':>10}")
    print(f"{'LangGraph imports alone':38}{f['framework']['import_ms']:>10.1f}{'':>10}{f['framework']['process_ms']:>10.1f}")
    print(
        f"{'LangGraph + SqliteSaver, finished run':38}{f['peer']['import_ms']:>10.1f}{f['peer']['work_ms']:>10.1f}{f['peer']['process_ms']:>10.1f}"
    )
    print(
        f"{'Tether run_agent, finished run':38}{f['tether']['import_ms']:>10.1f}{f['tether']['work_ms']:>10.1f}{f['tether']['process_ms']:>10.1f}"
    )
    print(
        f"{'  of which tether + adapter (after the framework)':38}{f['tether']['tether_import_ms']:>10.1f}"
        f"   (the adapter's own framework modules included: langchain_core.load, langgraph.checkpoint)"
    )
    print(
        f"finished run above the peer: {f['finished_run_overhead_ms']:.1f} ms wall (goal ≤ 100), {f['finished_run_cpu_overhead_ms']:.1f} ms CPU "
        f"(work CPU: peer {f['peer']['work_cpu_ms']:.1f}, ours {f['tether']['work_cpu_ms']:.1f}); imports above the framework's (separate processes): {f['import_overhead_ms']:.1f} ms"
    )
    print(f"live model calls while starting the finished runs again: {f['live_model_calls_when_started_again']}")
    save("startup", figures)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
