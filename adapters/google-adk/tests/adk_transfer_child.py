"""One attempt of the transfer scenario of test_transfer_kill.py, forked from a warm zygote
(``tests/support/zygote.py``): the router hands the request to its billing sub-agent
(``transfer_to_agent``), which refunds and answers. ``kill_after_turn``: SIGKILL right after that
many model turns (replayed or live) were recorded; ``kill_after_tool``: right after the first live
Tether tool call was recorded."""

from __future__ import annotations

import asyncio
import json
import os
import signal

PROMPT = "transfer: refund order 7"


def preload() -> None:
    import google.adk.agents  # noqa: F401

    import tether_google_adk  # noqa: F401


def child(args: dict) -> int:
    from google.adk.agents import LlmAgent

    from tether_google_adk import adk_tool, run_agent, tool

    @tool  # defined here, not at import: defining a tool starts a thread, which a fork would not copy
    def refund(order: str) -> str:
        """Refund an order."""
        with open(os.environ["TETHER_TOOL_LOG"], "a") as f:
            f.write(json.dumps({"tool": "refund", "order": order}) + "\n")
        return f"Order {order} refunded."

    turns = 0

    def on_step(event) -> None:
        nonlocal turns
        if event.kind == "tool" and not event.replayed and args.get("kill_after_tool"):
            os.kill(os.getpid(), signal.SIGKILL)
        if event.kind == "model":
            turns += 1
            if turns == args.get("kill_after_turn"):
                os.kill(os.getpid(), signal.SIGKILL)

    billing = LlmAgent(name="billing", model="gemini-2.5-flash", instruction="You issue refunds.", tools=[adk_tool(refund)])
    router = LlmAgent(name="router", model="gemini-2.5-flash", instruction="Route each request to the right agent.", sub_agents=[billing])
    result = asyncio.run(
        run_agent(
            PROMPT,
            agent=router,
            run_id="transfer",
            store=args["store"],
            upstreams={"gemini": args["origin"] + "/gemini"},
            stream=args["stream"],
            on_step=on_step,
        )
    )
    fields = ("status", "output", "model_live", "model_replayed", "tool_live", "tool_replayed")
    print(json.dumps({f: getattr(result, f) for f in fields}), flush=True)
    return 0
