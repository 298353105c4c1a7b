"""The conformance scenarios: tools, scripts and prompts every adapter is run against.

Tools log each real execution to ``$TETHER_TOOL_LOG`` (one JSON line: tool, arguments, pid), so
tests count executions across processes.
"""

from __future__ import annotations

import json
import os

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

PROMPTS = {
    "multi": "multi: what is the weather in Paris and what do you know about it?",
    "broken": "broken: call the broken tool",
    "refund": "refund: please refund order A1",
    "memory1": "memory: remember that my name is Ada",
    "memory2": "memory: what is my name?",
    "delegate": "delegate: ask the weather agent about Paris",
    "weather": "weather: how is the weather in Paris?",
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
