"""The reference scenario's two tools (5.1 s and 16.6 s, times $TETHER_BENCH_SCALE), logging each
execution to $TETHER_TOOL_LOG so the benchmark counts re-executions."""

from __future__ import annotations

import asyncio
import json
import os

SCALE = float(os.environ.get("TETHER_BENCH_SCALE", "1"))


def _log(tool: str) -> None:
    with open(os.environ["TETHER_TOOL_LOG"], "a") as f:
        f.write(json.dumps({"tool": tool, "pid": os.getpid()}) + "\n")


async def get_weather(city: str) -> str:
    """Current weather in a city (slow service: 5.1 s)."""
    await asyncio.sleep(5.1 * SCALE)
    _log("get_weather")
    return f"{city}: sunny, 21 C"


async def lookup(topic: str) -> str:
    """Look a topic up (slower service: 16.6 s)."""
    await asyncio.sleep(16.6 * SCALE)
    _log("lookup")
    return f"{topic}: well documented"
