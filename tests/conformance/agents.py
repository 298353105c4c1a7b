"""The conformance scenarios: tools, scripts and prompts every adapter is run against.

Tools log each real execution to ``$TETHER_TOOL_LOG`` (one JSON line: tool, arguments, pid), so
tests count executions across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import tether
from tether import tool


def _log(name: str, **arguments) -> None:
    if path := os.environ.get("TETHER_TOOL_LOG"):
        with open(path, "a") as f:
            f.write(json.dumps({"tool": name, "arguments": arguments, "pid": os.getpid()}) + "\n")


@tool
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    _log("get_weather", city=city)
    return f"The weather in {city} is sunny, 21 C."


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the knowledge base."""
    _log("lookup", topic=topic)
    return f"{topic} is a city of two million people."


@tool
def broken(reason: str) -> str:
    """A tool that always fails."""
    _log("broken", reason=reason)
    raise RuntimeError(f"the backend is down ({reason})")


@tool(approval="Refund {amount} USD on order {order}?")
def issue_refund(order: str, amount: int) -> str:
    """Refund an order (needs a human's approval)."""
    _log("issue_refund", order=order, amount=amount)
    return f"Refunded {amount} USD on order {order}."


TOOLS = [get_weather, lookup, broken, issue_refund]


class Rendezvous:
    """Parallel tool calls that can only finish if they overlap (no wall-clock timing).

    Each call waits until ``$TETHER_MEET_PARTIES`` calls have arrived; run one after the other,
    the first call waits alone until the deadline and fails. Then, with the others still running,
    it checks that it sees its own tool's secret and not the other tool's (``tether.secrets``). With ``$TETHER_MEET_FINISH=i`` only
    call ``i`` returns after meeting; the others wait until the process is killed (or fail at the
    deadline): a kill that lands between parallel calls, after exactly one of them finished.
    """

    DEADLINE_S = 20.0

    def __init__(self) -> None:
        self.arrived = 0
        self.lock = threading.Lock()

    def arrive(self, i: int) -> float:
        _log("meet", i=i)
        with self.lock:
            self.arrived += 1
        return time.monotonic() + self.DEADLINE_S

    def ready(self, i: int) -> bool:
        parties = int(os.environ.get("TETHER_MEET_PARTIES", "1"))
        finish = os.environ.get("TETHER_MEET_FINISH")
        with self.lock:
            met = self.arrived >= parties
        return met and (finish is None or int(finish) == i)

    def outcome(self, i: int, tool_name: str) -> str:
        if not self.ready(i):
            raise RuntimeError(f"call {i}: only {self.arrived} of $TETHER_MEET_PARTIES calls had started by the deadline")
        own = MEET_SECRETS[tool_name]  # while the other calls run too: each sees its own secret only
        if tether.secret("MEET_TOKEN") != own or os.environ.get("MEET_TOKEN") != own:
            raise RuntimeError(f"call {i} of {tool_name} did not see its own MEET_TOKEN (and only it)")
        return f"met {i}"


_rendezvous = Rendezvous()


@tool
async def meet_async(i: int) -> str:
    """Meet the other parallel calls (async)."""
    deadline = _rendezvous.arrive(i)
    while not _rendezvous.ready(i) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return _rendezvous.outcome(i, "meet_async")


@tool
def meet_sync(i: int) -> str:
    """Meet the other parallel calls (sync: runs in a worker thread)."""
    deadline = _rendezvous.arrive(i)
    while not _rendezvous.ready(i) and time.monotonic() < deadline:
        time.sleep(0.01)
    return _rendezvous.outcome(i, "meet_sync")


#: Each meet tool's own secret (its AgentTool ``env``, as ``tether exec`` would attach it).
MEET_SECRETS = {"meet_async": "meet-async-s3cret-5521", "meet_sync": "meet-sync-s3cret-9043"}
for _t in (meet_async, meet_sync):
    _t.spec.secrets = {"MEET_TOKEN": MEET_SECRETS[_t.name]}

#: The parallel scenario's four calls in one turn: two async tools, two sync ones.
PARALLEL_TOOLS = [meet_async, meet_sync]
PARALLEL_CALLS = 4

PROMPTS = {
    "multi": "multi: what is the weather in Paris and what do you know about it?",
    "broken": "broken: call the broken tool",
    "refund": "refund: please refund order A1",
    "memory1": "memory: remember that my name is Ada",
    "memory2": "memory: what is my name?",
    "delegate": "delegate: ask the weather agent about Paris",
    "weather": "weather: how is the weather in Paris?",
    "parallel": "parallel: meet everyone at once",
}

#: Turns per scenario; the fake provider picks the conversation by the first user message.
SCRIPT = {
    "conversations": [
        {
            "match": "multi:",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Answer:"},
            ],
        },
        {
            "match": "parallel:",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "meet_async" if i % 2 else "meet_sync", "arguments": {"i": i}} for i in range(1, PARALLEL_CALLS + 1)
                    ]
                },
                {"text_from_tool_results": True, "text": "Met:"},
            ],
        },
        {
            "match": "broken:",
            "turns": [
                {"tool_calls": [{"name": "broken", "arguments": {"reason": "test"}}]},
                {"text_from_tool_results": True, "text": "The tool said:"},
            ],
        },
        {
            "match": "refund:",
            "turns": [
                {"tool_calls": [{"name": "issue_refund", "arguments": {"order": "A1", "amount": 20}}]},
                {"text_from_tool_results": True, "text": "Refund result:"},
            ],
        },
        {
            "match": "memory:",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "Ada"}}]},
                {"text": "Noted."},
            ],
        },
        # Anything else (sub-agents see their own first message): one tool call, then an answer.
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        },
    ]
}

#: Model turns of each scenario when run uninterrupted.
TURNS = {"multi": 3, "broken": 2, "refund": 2, "memory1": 2}


def script_for(kit) -> dict:
    """The shared script, after the kit's own conversations for its multi-agent scenario."""
    extra = getattr(kit, "MULTI_SCRIPT", None) or []
    return {"conversations": [*extra, *SCRIPT["conversations"]]}
