"""What only Google ADK has: agent trees (sequential, parallel), agents as tools, and
which tools of a bring-your-own agent are journaled. The shared conformance suite covers the rest.

Every test runs ADK's real Runner and the real google-genai client against the fake Gemini
provider over HTTP; a "crash" is a provider failure half-way (the run fails), then a second
attempt with the same run id.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent, ParallelAgent, SequentialAgent
from google.adk.models import Gemini
from google.adk.tools.function_tool import FunctionTool

from tether.testing.fake_provider import FakeProvider, Fault
from tether.testing.script import Script
from tether_google_adk import ADAPTER, adk_tool, run_agent, tool

MODEL = "gemini-2.5-flash"
executions: list[str] = []


@tool
def lookup(topic: str) -> str:
    """Look a topic up in the knowledge base."""
    executions.append(f"lookup:{topic}")
    return f"{topic} is a city of two million people."


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    executions.append(f"get_weather:{city}")
    return f"The weather in {city} is sunny, 21 C."


@tool
def refund(order: str) -> str:
    """Refund an order."""
    executions.append(f"refund:{order}")
    return f"Order {order} refunded."


SCRIPT = {
    "conversations": [
        # transfer_to_agent: the router hands over; the billing agent (picked by its instructions)
        # refunds and answers. ADK shows it the router's calls as quoted context, not as its own.
        {
            "match": "transfer:",
            "system": "You issue refunds.",
            "turns": [
                {"tool_calls": [{"name": "refund", "arguments": {"order": "7"}}]},
                {"text_from_tool_results": True, "text": "Billing:"},
            ],
        },
        {"match": "transfer:", "turns": [{"tool_calls": [{"name": "transfer_to_agent", "arguments": {"agent_name": "billing"}}]}]},
        # A pipeline stage with include_contents="none" sees the earlier stage quoted as context.
        {"match": "For context:", "turns": [{"text": "Report: Paris is big and sunny."}]},
        {
            "match": "seq:",
            "turns": [
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Found:"},
            ],
        },
        {
            "match": "",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "lookup", "arguments": {"topic": "Paris"}},
                    ]
                },
                {"text_from_tool_results": True, "text": "Both:"},
            ],
        },
    ]
}


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    executions.clear()
    os.environ.setdefault("GEMINI_API_KEY", "conformance")
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        yield provider


def options(fake: FakeProvider, tmp_path: Path, run_id: str, **extra: object) -> dict:
    return {"run_id": run_id, "store": str(tmp_path / "store"), "upstreams": {"gemini": f"{fake.url}/gemini"}, **extra}


def pipeline() -> SequentialAgent:
    researcher = LlmAgent(name="researcher", model=MODEL, instruction="Research the topic.", tools=[adk_tool(lookup)], output_key="notes")
    # One stage names its model, the other brings a Gemini object (its settings are kept).
    writer = LlmAgent(name="writer", model=Gemini(model=MODEL), instruction="Write a report from: {notes}", include_contents="none")
    return SequentialAgent(name="pipeline", sub_agents=[researcher, writer])


async def test_sequential_tree_resumes_at_the_stage_that_never_finished(fake, tmp_path):
    """The writer's call fails (a 500 once the researcher is done): the retry replays the
    researcher's two turns and its tool from the journal and calls the model for the writer only."""
    fake.inject(Fault("status:500", after=2))  # the third call: the writer's
    with pytest.raises(Exception, match="500"):
        await run_agent("seq: research Paris", agent=pipeline(), **options(fake, tmp_path, "seq"))
    assert fake.live_calls() == 2 and executions == ["lookup:Paris"]

    result = await run_agent("seq: research Paris", agent=pipeline(), **options(fake, tmp_path, "seq"))
    assert result.status == "succeeded" and result.output == "Report: Paris is big and sunny."
    assert (result.model_replayed, result.model_live, result.tool_replayed, result.tool_live) == (2, 1, 1, 0)
    assert fake.live_calls() == 3 and executions == ["lookup:Paris"]


async def test_parallel_agents_replay_whatever_order_they_finished_in(fake, tmp_path):
    """Two branches of a ParallelAgent run concurrently; their journal keys come from the requests
    (each branch has its own instruction), not from completion order, so a retry replays both."""

    def tree() -> ParallelAgent:
        return ParallelAgent(
            name="both",
            sub_agents=[
                LlmAgent(name="a", model=MODEL, instruction="Branch A.", tools=[adk_tool(get_weather), adk_tool(lookup)]),
                LlmAgent(name="b", model=MODEL, instruction="Branch B.", tools=[adk_tool(get_weather), adk_tool(lookup)]),
            ],
        )

    first = await run_agent("parallel: Paris", agent=tree(), **options(fake, tmp_path, "par"))
    assert first.status == "succeeded" and first.model_live == 4 and first.tool_live == 4
    second = await run_agent("parallel: Paris", agent=tree(), **options(fake, tmp_path, "par"))
    assert (second.model_live, second.tool_live, second.model_replayed, second.tool_replayed) == (0, 0, 4, 4)
    assert fake.live_calls() == 4 and sorted(executions) == sorted(["get_weather:Paris", "lookup:Paris"] * 2)


def router() -> LlmAgent:
    billing = LlmAgent(name="billing", model=MODEL, instruction="You issue refunds.", tools=[adk_tool(refund)])
    return LlmAgent(name="router", model=MODEL, instruction="Route each request to the right agent.", sub_agents=[billing])


@pytest.mark.parametrize("failing_turn", [2, 3])
async def test_a_transfer_to_a_sub_agent_replays_both_agents_turns(fake, tmp_path, failing_turn):
    """The router's turn (transfer_to_agent) and the billing agent's turns are journaled apart (each
    agent sends its own instructions): a run that fails at the billing agent's turn 2 or 3 resumes
    there, with the router's transfer and the refund replayed, not repeated."""
    fake.inject(Fault("status:500", after=failing_turn - 1))
    with pytest.raises(Exception, match="500"):
        await run_agent("transfer: refund order 7", agent=router(), **options(fake, tmp_path, "transfer"))
    done = failing_turn - 1
    assert fake.live_calls() == done and executions == ["refund:7"] * (failing_turn == 3)

    result = await run_agent("transfer: refund order 7", agent=router(), **options(fake, tmp_path, "transfer"))
    assert result.status == "succeeded" and result.output == "Billing: Order 7 refunded."
    assert (result.model_replayed, result.model_live) == (done, 3 - done)
    assert (result.tool_replayed, result.tool_live) == ((1, 0) if failing_turn == 3 else (0, 1))
    assert fake.live_calls() == 3 and executions == ["refund:7"]
    # The second agent really answered: the last live request carried the billing instructions.
    assert [e.turn for e in fake.ledger.snapshot() if e.live] == [0, 0, 1]


async def test_plain_adk_tools_of_your_own_agent_are_not_journaled(fake, tmp_path):
    """Said plainly in the README: a FunctionTool over a plain function (not a Tether tool) is
    called by ADK itself, so it runs again on a retry; the Tether tool beside it does not."""
    plain_runs: list[str] = []

    def get_weather(city: str) -> str:  # shadows the Tether tool's name on purpose: same script
        """Get the current weather in a city."""
        plain_runs.append(city)
        return f"The weather in {city} is sunny, 21 C."

    def agent() -> LlmAgent:
        return LlmAgent(name="mixed", model=MODEL, instruction="Answer.", tools=[FunctionTool(get_weather), adk_tool(lookup)])

    await run_agent("mixed: Paris", agent=agent(), **options(fake, tmp_path, "mixed"))
    second = await run_agent("mixed: Paris", agent=agent(), **options(fake, tmp_path, "mixed"))
    assert second.model_live == 0 and second.tool_replayed == 1
    assert plain_runs == ["Paris", "Paris"] and executions == ["lookup:Paris"]


async def test_your_agent_object_is_never_changed(fake, tmp_path):
    """The adapter routes a clone of the tree: the user's agents keep their models."""
    tree = pipeline()
    researcher, writer = tree.sub_agents
    assert isinstance(researcher, LlmAgent) and isinstance(writer, LlmAgent)
    writer_model = writer.model
    assert isinstance(writer_model, Gemini)
    await run_agent("seq: research Paris", agent=tree, **options(fake, tmp_path, "untouched"))
    assert researcher.model == MODEL and writer.model is writer_model
    assert writer_model.client_kwargs is None and fake.live_calls() == 3


def test_declarative_agents_speak_gemini_only():
    from tether.agent import AgentSession, AgentSpec
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="speak Gemini"):
        ADAPTER.build_spec(AgentSpec("gpt-4o-mini", "openai"), AgentSession(None, "openai"))
