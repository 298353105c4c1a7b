"""The conformance run under ``flyte.run`` in local mode, with a ``@tool``-over-``@env.task`` tool."""

from __future__ import annotations

import json
import os

import flyte

from tether import tool

env = flyte.TaskEnvironment(name="tether-conformance")


@tool
@env.task
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    if path := os.environ.get("TETHER_TOOL_LOG"):
        with open(path, "a") as f:
            f.write(
                json.dumps(
                    {"tool": "get_weather", "arguments": {"city": city}, "pid": os.getpid(), "flyte_action": flyte.ctx().action.name}
                )
                + "\n"
            )
    return f"The weather in {city} is sunny, 21 C."


@env.task
async def agent_task(args: str) -> str:
    """A Flyte task that runs the agent; tools run as child tasks."""
    from .driver import run_scenario

    return json.dumps(await run_scenario(json.loads(args), tools=[get_weather]))
