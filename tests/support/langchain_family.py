"""What the LangChain family's own tests share (adapters/langgraph, langchain and deepagents
tests): the scripted conversations and the tools they call, the environment and fake provider
fixtures, and the ``ChatOpenAI`` a conformance kit builds before its run exists (on the loopback
proxy's ``/r/active/openai/v1``). Store, run arguments and read-back: tests/support/adapter_tests.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain_openai import ChatOpenAI

from tether import tool
from tether.agent import Tool
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether_langgraph.family import openai_base_url

MODEL = "gpt-4o-mini"

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
        {"match": "memory:", "turns": [{"tool_calls": [{"name": "lookup", "arguments": {"topic": "Ada"}}]}, {"text": "Noted."}]},
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        },
    ]
}

calls: list[str] = []


@tool
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    calls.append("get_weather")
    return f"The weather in {city} is sunny, 21 C."


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    calls.append("lookup")
    return f"{topic} is a city of two million people."


@tool
def broken(reason: str) -> str:
    """A tool that always fails."""
    calls.append("broken")
    raise RuntimeError(f"the backend is down ({reason})")


class Flaky(Exception):
    pass


flaky_state = {"fail": True}


def flaky_lookup(topic: str) -> str:
    """A lookup whose backend is down on the first attempt (a retryable failure: not recorded)."""
    if flaky_state["fail"]:
        raise Flaky("try again")
    return f"{topic} is a name."


def flaky_tool() -> Tool:
    """:func:`flaky_lookup` under the name the script calls, its failure retryable."""
    return Tool(flaky_lookup, name="lookup", retryable=(Flaky,))


TOOLS = [get_weather, lookup, broken]


@pytest.fixture(autouse=True)
def openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider key for the SDK (the fake provider ignores it), and no calls yet."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    calls.clear()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        yield provider


def model() -> ChatOpenAI:
    """A conformance kit's model: built before the run, so on the proxy's active-run URL."""
    return ChatOpenAI(model=MODEL, base_url=openai_base_url(), stream_usage=True, max_retries=0)
