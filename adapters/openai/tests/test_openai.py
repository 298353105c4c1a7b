"""The OpenAI Agents SDK adapter against the fake provider over real HTTP: declarative and
bring-your-own agents (handoffs, sub-agents as tools, models with their own client), memory as
the SDK's Session protocol, streaming, tool failures, and a kill/resume in real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agents import Agent, FunctionTool, OpenAIResponsesModel
from agents.tracing.provider import DefaultTraceProvider

from tests.support.adapter_tests import records, store  # noqa: F401 (store: a fixture)
from tether.errors import ConfigError
from tether.memory import Memory
from tether.stores import open_store
from tether.testing.fake_provider import FakeProvider
from tether.testing.script import Script
from tether_openai import ADAPTER, TetherSession, run_agent, tool
from tether_openai.adapter import agent_graph

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MODEL = "gpt-4o-mini"

SCRIPT = {
    "conversations": [
        {
            "match": "two:",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"tool_calls": [{"name": "lookup", "arguments": {"topic": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Answer:"},
            ],
        },
        {
            "match": "flaky:",
            "turns": [
                {"tool_calls": [{"name": "flaky", "arguments": {"x": "1"}}]},
                {"text_from_tool_results": True, "text": "Flaky said:"},
            ],
        },
        {"match": "memory:", "turns": [{"text": "Noted."}]},
        {
            "match": "parallel:",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "get_weather", "arguments": {"city": "Paris"}},
                        {"name": "get_weather", "arguments": {"city": "Rome"}},
                        {"name": "lookup", "arguments": {"topic": "Rome"}},
                        {"name": "lookup", "arguments": {"topic": "Rome"}},
                    ]
                },
                {"text_from_tool_results": True, "text": "All:"},
            ],
        },
        {
            "match": "delegate:",
            "turns": [
                {"tool_calls": [{"name": "transfer_to_weather_agent", "arguments": {}}]},
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Weather agent:"},
            ],
        },
        {
            "match": "manage:",
            "turns": [
                {"tool_calls": [{"name": "ask_weather_agent", "arguments": {"input": "How is Paris today?"}}]},
                {"text_from_tool_results": True, "text": "Manager:"},
            ],
        },
        {"match": "plain:", "turns": [{"text": "Plain answer."}]},
        {
            "match": "",
            "turns": [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                {"text_from_tool_results": True, "text": "Done:"},
            ],
        },
    ]
}

executions: list[tuple[str, dict]] = []


@tool
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    executions.append(("get_weather", {"city": city}))
    return f"The weather in {city} is sunny."


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    executions.append(("lookup", {"topic": topic}))
    return f"{topic} has two million people."


class Flaky(Exception):
    pass


flaky_fails = [True]


@tool(retryable=(Flaky,))
def flaky(x: str) -> str:
    """Fails with a retryable error while flaky_fails[0] is set."""
    executions.append(("flaky", {"x": x}))
    if flaky_fails[0]:
        raise Flaky("try later")
    return "flaky ok"


TOOLS = [get_weather, lookup]


@pytest.fixture
def fake():
    executions.clear()
    with FakeProvider(Script.from_dict(SCRIPT), seed=3) as provider:
        yield provider


def common(fake, store, **extra):
    return {"upstreams": {"openai": fake.url + "/openai"}, "store": store, **extra}


# -- declarative -------------------------------------------------------------------------------


async def test_declarative_run_records_then_replays_without_upstream_calls(fake, store):
    first = await run_agent(
        "two: weather and facts", model=MODEL, tools=TOOLS, instructions="Be helpful.", run_id="r", **common(fake, store)
    )
    assert first.status == "succeeded"
    assert first.output == "Answer: Paris has two million people."  # quotes the last tool result
    assert (first.model_live, first.tool_live) == (3, 2)
    assert fake.live_calls("openai-responses") == 3
    assert len(records(store, "r")) == 3 and len(records(store, "r", "tool")) == 2
    assert [r.request["path"] for r in records(store, "r")] == ["/v1/responses"] * 3
    assert executions == [("get_weather", {"city": "Paris"}), ("lookup", {"topic": "Paris"})]

    again = await run_agent(
        "two: weather and facts", model=MODEL, tools=TOOLS, instructions="Be helpful.", run_id="r", **common(fake, store)
    )
    assert again.output == first.output
    assert (again.model_live, again.model_replayed, again.tool_live, again.tool_replayed) == (0, 3, 0, 2)
    assert fake.live_calls() == 3 and len(executions) == 2
    assert again.attempt == 2 and again.cost_usd == 0 and again.saved_usd == pytest.approx(first.cost_usd)


async def test_parallel_tool_calls_in_one_turn_replay_each_call_once(fake, store):
    first = await run_agent("parallel: four calls", model=MODEL, tools=TOOLS, run_id="par", **common(fake, store))
    output = first.output or ""
    assert output.startswith("All:") and output.count("sunny") == 2 and output.count("Rome has") == 2
    assert (first.model_live, first.tool_live) == (2, 4)
    assert sorted(r.occurrence for r in records(store, "par", "tool") if r.request["tool"] == "lookup") == [1, 2]
    again = await run_agent("parallel: four calls", model=MODEL, tools=TOOLS, run_id="par", **common(fake, store))
    assert (again.tool_live, again.tool_replayed, again.output) == (0, 4, first.output)
    assert len(executions) == 4


async def test_tools_are_sdk_function_tools_with_their_own_schema(fake, store):
    from tether.agent import AgentSession, AgentSpec

    agent = ADAPTER.build(AgentSpec(MODEL, "openai", "hi", list(TOOLS)), AgentSession(None, "openai"))
    assert isinstance(agent, Agent)
    [weather, look] = agent.tools
    assert isinstance(weather, FunctionTool) and isinstance(look, FunctionTool)
    assert weather.name == "get_weather" and weather.description == "Get the current weather in a city."
    assert weather.params_json_schema["properties"] == {"city": {"title": "City", "type": "string"}}
    assert look.name == "lookup"


async def test_streamed_run_records_streams_and_replays(fake, store):
    first = await run_agent("two: streamed", model=MODEL, tools=TOOLS, run_id="s", stream=True, **common(fake, store))
    assert first.status == "succeeded" and first.model_live == 3
    assert all(r.response["streamed"] for r in records(store, "s"))
    plain = await run_agent("two: streamed", model=MODEL, tools=TOOLS, run_id="p", **common(fake, store))
    assert plain.output == first.output
    calls = fake.live_calls()
    again = await run_agent("two: streamed", model=MODEL, tools=TOOLS, run_id="s", stream=True, **common(fake, store))
    assert fake.live_calls() == calls and again.model_replayed == 3 and again.output == first.output


@pytest.mark.parametrize("stream", [False, True])
async def test_retryable_tool_error_fails_the_attempt_and_the_retry_runs_it(fake, store, stream):
    flaky_fails[0] = True
    with pytest.raises(Flaky):  # the original exception, not the SDK's UserError wrapper
        await run_agent("flaky: go", model=MODEL, tools=[flaky], run_id="f", stream=stream, **common(fake, store))
    assert records(store, "f", "tool") == []  # not recorded: the next attempt runs it again
    flaky_fails[0] = False
    done = await run_agent("flaky: go", model=MODEL, tools=[flaky], run_id="f", stream=stream, **common(fake, store))
    assert done.output == "Flaky said: flaky ok"
    assert (done.model_replayed, done.model_live) == (1, 1)
    assert executions == [("flaky", {"x": "1"})] * 2


async def test_no_trace_is_started_even_with_tracing_enabled(fake, store, monkeypatch):
    from agents import tracing
    from agents.tracing import TracingProcessor

    monkeypatch.delenv("OPENAI_AGENTS_DISABLE_TRACING", raising=False)
    seen = []

    class Spy(TracingProcessor):
        def on_trace_start(self, trace):
            seen.append(trace)

        def on_trace_end(self, trace): ...
        def on_span_start(self, span):
            seen.append(span)

        def on_span_end(self, span): ...
        def shutdown(self): ...
        def force_flush(self): ...

    provider = tracing.get_trace_provider()
    assert isinstance(provider, DefaultTraceProvider)
    saved = provider._multi_processor._processors, provider._manual_disabled  # test-only peek
    tracing.set_trace_processors([Spy()])  # a spy instead of the exporter: nothing leaves
    provider.set_disabled(False)
    try:
        await run_agent("manage: ask about Paris", agent="byo_agents:manager", run_id="tr", **common(fake, store))
    finally:
        tracing.set_trace_processors(list(saved[0]))
        provider._manual_disabled = saved[1]
        provider._refresh_disabled_flag()
    assert seen == []


async def test_without_durability_the_agent_still_runs(fake, store, monkeypatch):
    # Without a run, ``upstreams=`` has nowhere to go: the environment names the upstream.
    monkeypatch.setenv("TETHER_UPSTREAM_OPENAI", fake.url + "/openai")
    result = await run_agent("plain: hello", model=MODEL, durable=False, store=store)
    assert result.output == "Plain answer." and fake.live_calls() == 1


# -- memory: the SDK's Session protocol ----------------------------------------------------------


async def test_memory_key_gives_the_second_run_the_first_conversation(fake, store):
    first = await run_agent("memory: my name is Ada", model=MODEL, memory_key="ada", run_id="m1", **common(fake, store))
    assert first.output == "Noted."
    second = await run_agent("memory: what is my name?", model=MODEL, memory_key="ada", run_id="m2", **common(fake, store))
    assert second.status == "succeeded"
    sent = records(store, "m2")[0].request["body"]["input"]
    texts = [json.dumps(item) for item in sent]
    assert "my name is Ada" in texts[0] and "Noted." in texts[1] and "what is my name?" in texts[2]

    items = Memory(open_store(store), "default", "ada").load()
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
    assert items[0]["content"] == "memory: my name is Ada"


async def test_memory_crash_then_retry_keeps_one_copy(fake, store):
    flaky_fails[0] = True
    with pytest.raises(Flaky):
        await run_agent("flaky: remember", model=MODEL, tools=[flaky], memory_key="k", run_id="c", **common(fake, store))
    assert Memory(open_store(store), "default", "k").load() == []  # nothing committed by a failed run
    flaky_fails[0] = False
    await run_agent("flaky: remember", model=MODEL, tools=[flaky], memory_key="k", run_id="c", **common(fake, store))
    await run_agent("flaky: remember", model=MODEL, tools=[flaky], memory_key="k", run_id="c", **common(fake, store))  # a re-run
    items = Memory(open_store(store), "default", "k").load()
    assert sum(1 for i in items if i.get("content") == "flaky: remember") == 1
    assert [i.get("type") for i in items].count("function_call") == 1


async def test_tether_session_follows_the_session_protocol():
    from agents.memory import Session

    from tether.agent import AgentSession

    s = AgentSession(None, "openai", history=[{"role": "user", "content": "old"}])
    session = TetherSession(s)
    assert isinstance(session, Session)
    await session.add_items([{"role": "user", "content": "new"}, {"role": "assistant", "content": "ok"}])
    assert [i["content"] for i in await session.get_items()] == ["old", "new", "ok"]
    assert [i["content"] for i in await session.get_items(limit=1)] == ["ok"]
    assert (await session.pop_item())["content"] == "ok"
    assert s.new_items == [{"role": "user", "content": "new"}]
    (await session.get_items())[0]["content"] = "changed by the caller"
    assert s.history[0]["content"] == "old"
    await session.pop_item()
    assert await session.pop_item() is None  # committed history is append-only
    with pytest.raises(Exception, match="append-only"):
        await session.clear_session()


# -- bring your own --------------------------------------------------------------------------------


async def test_byo_import_path_with_a_handoff_replays(fake, store):
    first = await run_agent("delegate: weather please", agent="byo_agents:triage", run_id="h", **common(fake, store))
    assert first.status == "succeeded" and first.output == "Weather agent: The weather in Paris is sunny."
    assert first.model_live == 3 and fake.live_calls() == 3
    instructions = [r.request["body"]["instructions"] for r in records(store, "h")]
    assert instructions == ["Hand weather questions over.", "Answer weather questions.", "Answer weather questions."]
    again = await run_agent("delegate: weather please", agent="byo_agents:triage", run_id="h", **common(fake, store))
    assert (again.model_live, again.model_replayed, again.output) == (0, 3, first.output)
    assert fake.live_calls() == 3


async def test_byo_object_with_a_sub_agent_as_tool_routes_the_nested_run(fake, store):
    from byo_agents import manager

    first = await run_agent("manage: ask about Paris", agent=manager, run_id="t", **common(fake, store))
    assert first.output == "Manager: Done: The weather in Paris is sunny."
    assert first.model_live == 4 and fake.live_calls() == 4  # 2 manager turns + 2 nested turns
    again = await run_agent("manage: ask about Paris", agent=manager, run_id="t", **common(fake, store))
    assert (again.model_live, again.model_replayed, again.output) == (0, 4, first.output)


async def test_byo_factory_is_called(fake, store):
    result = await run_agent("plain: hi", agent="byo_agents:make_agent", run_id="fac", **common(fake, store))
    assert result.output == "Plain answer." and result.model_live == 1


async def test_byo_model_with_its_own_client_goes_through_the_seam_and_is_put_back(fake, store, monkeypatch):
    monkeypatch.setenv("BYO_OPENAI_BASE_URL", fake.url + "/openai/v1")
    from byo_agents import own_client_agent

    agent = own_client_agent()
    model = agent.model
    assert isinstance(model, OpenAIResponsesModel)
    original = model._client
    first = await run_agent("own: weather", agent=agent, run_id="o", **common(fake, store))
    assert first.output == "Done: The weather in Paris is sunny." and first.model_live == 2
    assert model._client is original and agent.model is model
    again = await run_agent("own: weather", agent=agent, run_id="o", **common(fake, store))
    assert again.model_replayed == 2 and fake.live_calls() == 2


async def test_byo_on_chat_completions_is_journaled_too(fake, store):
    from agents import set_default_openai_api

    set_default_openai_api("chat_completions")
    try:
        first = await run_agent("delegate: weather please", agent="byo_agents:triage", run_id="cc", **common(fake, store))
    finally:
        set_default_openai_api("responses")
    assert first.output == "Weather agent: The weather in Paris is sunny." and first.model_live == 3
    assert {r.request["path"] for r in records(store, "cc")} == {"/v1/chat/completions"}
    assert fake.live_calls("openai-chat") == 3


async def test_concurrent_runs_of_one_own_client_agent_each_journal_their_turns(fake, store, monkeypatch):
    import asyncio

    monkeypatch.setenv("BYO_OPENAI_BASE_URL", fake.url + "/openai/v1")
    from byo_agents import own_client_agent

    agent = own_client_agent()
    model = agent.model
    assert isinstance(model, OpenAIResponsesModel)
    original = model._client
    a, b = await asyncio.gather(*(run_agent("own: weather", agent=agent, run_id=f"c{i}", **common(fake, store)) for i in range(2)))
    assert (a.model_live, b.model_live) == (2, 2) and len(records(store, "c0")) == len(records(store, "c1")) == 2
    assert model._client is original and agent.model is model


def test_agent_graph_finds_handoffs_and_sub_agents():
    from byo_agents import manager, triage

    assert [a.name for a in agent_graph(triage)] == ["triage", "weather_agent"]
    assert sorted(a.name for a in agent_graph(manager)) == ["manager", "weather_agent"]


# -- kill and resume in real processes ---------------------------------------------------------------

CHILD = r"""
import asyncio, json, os, sys, time
from tether.testing.fake_provider import FakeProvider
from tether_openai import run_agent, tool

def log(name):
    with open(os.environ["TOOL_LOG"], "a") as f:
        f.write(json.dumps({"tool": name, "event": "start"}) + "\n")

@tool
def quick(q: str) -> str:
    "Quick tool."
    log("quick")
    return "quick " + q

@tool
def slow(q: str) -> str:
    "Slow tool."
    log("slow")
    time.sleep(float(os.environ["SLOW_S"]))
    return "slow " + q

async def main():
    r = await run_agent("bench: go", model="gpt-4o-mini", tools=[quick, slow], run_id="bench", store=os.environ["STORE"],
                        upstreams={"openai": os.environ["ORIGIN"] + "/openai"})
    print(json.dumps({"output": r.output, "model_live": r.model_live, "model_replayed": r.model_replayed,
                      "tool_live": r.tool_live, "tool_replayed": r.tool_replayed, "attempt": r.attempt}))
asyncio.run(main())
"""

BENCH = {
    "conversations": [
        {
            "match": "bench:",
            "turns": [
                {"tool_calls": [{"name": "quick", "arguments": {"q": "a"}}]},
                {"tool_calls": [{"name": "slow", "arguments": {"q": "b"}}]},
                {"text_from_tool_results": True, "text": "Final:"},
            ],
        }
    ]
}


def test_kill_during_a_tool_then_resume_replays_finished_steps(tmp_path):
    """Killed (SIGKILL) while the second tool runs, after two model turns: the retry makes 0 live
    calls for those turns, never re-runs the finished tool, and gives the uninterrupted answer."""
    tool_log = tmp_path / "tools.jsonl"
    tool_log.touch()
    with FakeProvider(Script.from_dict(BENCH)) as provider:
        env = {
            **os.environ,
            "TOOL_LOG": str(tool_log),
            "STORE": str(tmp_path / "store"),
            "ORIGIN": provider.url,
            "SLOW_S": "60",
            "OPENAI_API_KEY": "sk-test",
            "PYTHONPATH": str(ROOT),
        }
        child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stderr is not None
        deadline = time.time() + 120
        while "slow" not in tool_log.read_text() and time.time() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert child.poll() is None, child.stderr.read()
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert provider.live_calls() == 2

        env["SLOW_S"] = "0"
        started = time.time()
        retry = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=180)
        assert retry.returncode == 0, retry.stderr[-3000:]
        result = json.loads(retry.stdout.strip().splitlines()[-1])
        assert (result["model_replayed"], result["model_live"]) == (2, 1)
        assert (result["tool_replayed"], result["tool_live"]) == (1, 1)  # quick replayed, slow runs (it never finished)
        assert result["output"] == "Final: slow b" and result["attempt"] == 2
        assert provider.live_calls() == 3
        assert [json.loads(line)["tool"] for line in tool_log.read_text().splitlines()] == ["quick", "slow", "slow"]

        third = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=180)
        replay = json.loads(third.stdout.strip().splitlines()[-1])
        assert (replay["model_live"], replay["tool_live"], replay["output"]) == (0, 0, result["output"])
        assert provider.live_calls() == 3
        print(f"retry process wall time {time.time() - started:.2f}s")


async def test_a_byo_agents_cached_tether_tool_is_reused_across_runs_and_shown_as_cached(fake, store):
    """cache="auto" on a Tether tool of a bring-your-own agent: three runs (three run ids) call the
    tool once; the later runs show the result as cached (from another run), not replayed."""
    from agents import Agent

    from tether_openai.adapter import function_tool

    cached = tool(cache="auto")(get_weather.fn)
    agent = Agent(name="byo", instructions="Be brief.", model=MODEL, tools=[function_tool(cached)])
    results = [await run_agent("Weather in Paris?", agent=agent, run_id=f"byo-cache-{i}", **common(fake, store)) for i in range(3)]
    assert all(r.status == "succeeded" for r in results)
    assert executions == [("get_weather", {"city": "Paris"})], "cache=auto ran the tool again in another run"
    assert [[e.mode for e in r.events if e.kind == "tool"] for r in results] == [["live"], ["cached"], ["cached"]]


async def test_tools_or_instructions_beside_a_byo_agent_are_refused(fake, store):
    """They would never reach it: refused, never silently ignored."""
    from byo_agents import make_agent

    for extra in ({"tools": TOOLS}, {"instructions": "Be terse."}):
        with pytest.raises(ConfigError, match="bring-your-own agent brings its own tools and instructions"):
            await run_agent("plain: hi", agent=make_agent(), run_id="byo-extra", **common(fake, store), **extra)
    assert fake.live_calls() == 0
