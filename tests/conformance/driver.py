"""Run one conformance scenario through an adapter, in its own process.

    python -m tests.conformance.driver '{"kit": ..., "scenario": "multi", "run_id": ..., "store": ...,
                                         "origin": ..., "kill_after_turn": 0, "stream": false, "memory_key": null}'

(``instructions`` optional: the agent's instructions, "You are a helpful assistant." by default.) Prints one JSON line with the result. ``kill_after_turn`` SIGKILLs the process right after the
k-th model turn was recorded, like a node dying mid-run; ``kill_after_tool`` right after the first
live tool call was recorded (an integer n: after the n-th). The suite forks each such process from a
warm zygote (``tests/support/zygote.py``: ``preload`` once, then ``child(args)`` per attempt).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import sys

from tether.agent import load_adapter, run_agent
from tether.wire.providers import PROVIDERS


def load_kit(path: str):
    spec = importlib.util.spec_from_file_location("tether_conformance_kit", path)
    assert spec is not None and spec.loader is not None, f"no kit at {path}"
    kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kit)
    return kit


async def main(args: dict) -> dict:
    if args["scenario"] == "flyte":
        import flyte

        from .flyte_agents import agent_task

        flyte.init()
        run = flyte.run(agent_task, json.dumps({**args, "scenario": "weather"}))
        outcome: dict = json.loads(run.outputs()[0])
        return outcome
    from .agents import PARALLEL_TOOLS, TOOLS  # here, not at the top: defining a tool imports Flyte (see preload)

    if args["scenario"] == "parallel":
        from tether.secrets import install_scoped_environ

        install_scoped_environ()  # as `tether exec` does: os.environ shows a tool call its own secrets
        return await run_scenario(args, PARALLEL_TOOLS)
    return await run_scenario(args, TOOLS)


async def run_scenario(args: dict, tools: list) -> dict:
    from .agents import PROMPTS

    kit = load_kit(args["kit"])
    adapter = load_adapter(kit.FRAMEWORK)
    turns = live_tools = 0

    def on_step(event) -> None:
        nonlocal turns, live_tools
        if event.kind == "tool" and not event.replayed and args.get("kill_after_tool"):
            live_tools += 1
            if live_tools >= int(args["kill_after_tool"]):
                os.kill(os.getpid(), signal.SIGKILL)  # the tool's record is written; parallel siblings still run
        if event.kind == "model":
            turns += 1
            if args.get("kill_after_turn") and turns >= args["kill_after_turn"]:
                os.kill(os.getpid(), signal.SIGKILL)

    scenario = args["scenario"]
    common = dict(
        run_id=args["run_id"],
        store=args["store"],
        upstreams={p: f"{args['origin']}/{p}" for p in PROVIDERS},
        memory_key=args.get("memory_key"),
        stream=bool(args.get("stream")),
        on_step=on_step,
    )
    if scenario == "delegate":
        agent = kit.multi_agent(tools)
        result = await run_agent(adapter, getattr(kit, "MULTI_PROMPT", PROMPTS["delegate"]), agent=agent, **common)
    else:
        result = await run_agent(
            adapter,
            PROMPTS[scenario],
            tools=tools,
            model=kit.MODEL,
            instructions=args.get("instructions") or "You are a helpful assistant.",
            **common,
        )
    return {
        "output": result.output,
        "status": result.status,
        "attempt": result.attempt,
        "model_live": result.model_live,
        "model_replayed": result.model_replayed,
        "tool_live": result.tool_live,
        "tool_replayed": result.tool_replayed,
        "first_divergence": result.first_divergence,
        "usage_live": result.usage_live,
        "usage_replayed": result.usage_replayed,
        "cost_usd": result.cost_usd,
        "saved_usd": result.saved_usd,
        "pending_approval": result.pending_approval,
    }


def preload() -> None:
    """What every attempt would import: the kit named by ``$TETHER_KIT`` and its adapter (and so
    its framework). Not Flyte, nor the scenarios' tools (defining a tool imports Flyte): importing
    Flyte starts a thread, which a fork would not copy; each attempt imports it (~0.2 s)."""
    load_adapter(load_kit(os.environ["TETHER_KIT"]).FRAMEWORK)


def child(args: dict) -> int:
    print(json.dumps(asyncio.run(main(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(child(json.loads(sys.argv[1])))
