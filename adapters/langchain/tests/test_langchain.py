"""The LangChain adapter against the fake provider over real HTTP: ``create_agent``'s turns and
tools journaled and replayed, memory as the message history (each message stored once, nothing
after a crash), bring-your-own agents routed through the proxy, streaming, tool errors through
``ToolErrorMiddleware``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, messages_from_dict
from langchain_openai import ChatOpenAI

import tether_langchain
from tests.support.adapter_tests import memory_items, records, run_args, store  # noqa: F401 (store: a fixture)
from tests.support.langchain_family import (  # noqa: F401 (fixtures)
    TOOLS,
    Flaky,
    calls,
    fake,
    flaky_state,
    flaky_tool,
    get_weather,
    lookup,
    openai_env,
)
from tether.errors import ConfigError
from tether.memory import Memory
from tether.stores import open_store
from tether_langchain import langchain_tool, openai_base_url, run_agent, tool_errors

# One event loop for the module: a user-built ChatOpenAI without its own client takes
# langchain-openai's process-wide cached httpx client, whose connections belong to the loop that
# opened them (langchain-ai/langchain#35783) — the bring-your-own tests share one such client.
pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_declarative_run_is_journaled_then_replayed(fake, store):
    first = await run_agent("multi: weather and facts?", model="gpt-4o-mini", tools=TOOLS, **run_args(fake, store, "decl"))
    assert first.status == "succeeded"
    assert first.output == "Answer: Paris is a city of two million people."
    assert (first.model_live, first.model_replayed, first.tool_live, first.tool_replayed) == (3, 0, 2, 0)
    assert fake.live_calls() == 3 and calls == ["get_weather", "lookup"]
    assert [r.request["path"] for r in records(store, "decl")] == ["/v1/chat/completions"] * 3

    again = await run_agent("multi: weather and facts?", model="gpt-4o-mini", tools=TOOLS, **run_args(fake, store, "decl"))
    assert again.output == first.output
    assert (again.model_live, again.model_replayed, again.tool_live, again.tool_replayed) == (0, 3, 0, 2)
    assert fake.live_calls() == 3 and calls == ["get_weather", "lookup"]
    assert again.cost_usd == 0 and again.usage_replayed == first.usage_live


async def test_the_wire_body_is_what_create_agent_sends(fake, store):
    """Chat Completions with the tools' schemas built by LangChain from the functions, the
    system prompt first, and no LangChain ids or run ids anywhere."""
    await run_agent("multi: weather?", model="gpt-4o-mini", tools=TOOLS, instructions="Be brief.", **run_args(fake, store, "body"))
    body = records(store, "body")[0].request["body"]
    assert body["model"] == "gpt-4o-mini" and body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1] == {"role": "user", "content": "multi: weather?"}
    schemas = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert schemas["lookup"]["parameters"]["properties"] == {"topic": {"type": "string"}}
    assert schemas["lookup"]["description"] == "Look a topic up."
    assert "lc_run" not in json.dumps(body) and "run_id" not in json.dumps(body)


async def test_tool_error_becomes_an_error_tool_message(fake, store):
    result = await run_agent("broken: go", model="gpt-4o-mini", tools=TOOLS, memory_key="err", **run_args(fake, store, "broken"))
    assert result.status == "succeeded"
    assert result.output == "The tool said: Error: tool broken failed: RuntimeError: the backend is down (test)"
    [tool_message] = [m for m in messages_from_dict(memory_items(store, "err")) if isinstance(m, ToolMessage)]
    assert tool_message.status == "error" and "the backend is down" in tool_message.content
    again = await run_agent("broken: go", model="gpt-4o-mini", tools=TOOLS, **run_args(fake, store, "broken"))
    assert again.output == result.output and calls == ["broken"]


async def test_memory_is_the_message_history(fake, store):
    first = await run_agent("memory: my name is Ada", model="gpt-4o-mini", tools=TOOLS, memory_key="ada", **run_args(fake, store, "m1"))
    second = await run_agent("memory: what is my name?", model="gpt-4o-mini", tools=TOOLS, memory_key="ada", **run_args(fake, store, "m2"))
    assert first.output == second.output == "Noted."
    # The second run's first request carries the first run's whole conversation, then the prompt.
    sent = records(store, "m2")[0].request["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[0]["content"] == "memory: my name is Ada" and sent[-1]["content"] == "memory: what is my name?"
    # Items are LangChain's message dicts; each message stored once, by the run that added it.
    items = memory_items(store, "ada")
    messages = messages_from_dict(items)
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage, HumanMessage, AIMessage]
    raw = json.dumps(items)
    assert raw.count("my name is Ada") == 1 and raw.count("what is my name?") == 1
    assert len(Memory(open_store(store), "default", "ada")._head()[0]) == 2  # one segment per run


async def test_a_crashed_attempt_commits_nothing_and_its_retry_commits_once(fake, store):
    flaky_state["fail"] = True
    flaky = flaky_tool()
    with pytest.raises(Flaky):
        await run_agent("memory: remember Ada", model="gpt-4o-mini", tools=[flaky], memory_key="crash", **run_args(fake, store, "c1"))
    assert memory_items(store, "crash") == []
    flaky_state["fail"] = False
    done = await run_agent("memory: remember Ada", model="gpt-4o-mini", tools=[flaky], memory_key="crash", **run_args(fake, store, "c1"))
    assert done.status == "succeeded" and done.model_replayed == 1  # the first turn was not paid twice
    items = memory_items(store, "crash")
    assert len(items) == 4 and json.dumps(items).count("remember Ada") == 1


async def test_streamed_run_is_recorded_as_streams_and_replays(fake, store):
    first = await run_agent("multi: stream it", model="gpt-4o-mini", tools=TOOLS, stream=True, **run_args(fake, store, "s"))
    assert first.status == "succeeded" and first.model_live == 3
    assert all(e.streamed for e in fake.ledger)
    assert all(r.response["streamed"] for r in records(store, "s"))
    assert first.usage_live["output_tokens"] > 0  # stream_usage is on: the last chunk carries usage
    again = await run_agent("multi: stream it", model="gpt-4o-mini", tools=TOOLS, stream=True, **run_args(fake, store, "s"))
    assert again.output == first.output and again.model_live == 0 and fake.live_calls() == 3


@pytest.fixture
def fresh_byo_module():
    sys.modules.pop("lc_byo_agents", None)
    yield
    sys.modules.pop("lc_byo_agents", None)


async def test_byo_import_path_is_routed_through_the_proxy(fake, store, fresh_byo_module, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/unreachable")  # restored after the import
    result = await run_agent("weather: Paris?", agent="lc_byo_agents:agent", **run_args(fake, store, "byo-path"))
    assert result.status == "succeeded" and result.output == "Done: The weather in Paris is sunny."
    assert (result.model_live, result.tool_live) == (2, 1) and fake.live_calls() == 2
    assert "OPENAI_BASE_URL" not in os.environ and os.environ["OPENAI_API_BASE"] == "http://127.0.0.1:9/unreachable"
    again = await run_agent("weather: Paris?", agent="lc_byo_agents:agent", **run_args(fake, store, "byo-path"))
    assert again.output == result.output and again.model_replayed == 2 and fake.live_calls() == 2


async def test_byo_without_durability_is_not_routed(fake, store, fresh_byo_module, monkeypatch):
    """``durable=False``: no run, no proxy; the user's model goes where its own settings say."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url("openai"))
    result = await run_agent("weather: direct", agent="lc_byo_agents:agent", durable=False, store=store)
    assert result.status == "succeeded" and result.output == "Done: The weather in Paris is sunny."
    assert fake.live_calls() == 2 and not (Path(store) / "journal").exists()


async def test_byo_factory_and_own_checkpointer(fake, store, fresh_byo_module):
    made = await run_agent("weather: factory", agent="lc_byo_agents:make_agent", **run_args(fake, store, "byo-factory"))
    assert made.status == "succeeded" and made.model_live == 2
    # An agent with its own checkpointer gets a fresh thread per attempt: memory stays Tether's.
    for run_id in ("byo-saver-1", "byo-saver-2"):
        r = await run_agent("weather: saver", agent="lc_byo_agents:with_saver", memory_key="saver", **run_args(fake, store, run_id))
        assert r.status == "succeeded"
    second = records(store, "byo-saver-2")[0].request["body"]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_byo_object_built_on_the_proxy_url(fake, store):
    """An agent object built before the run, its model on ``openai_base_url()``, with memory."""
    agent = create_agent(
        ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0),
        tools=[langchain_tool(get_weather)],
        middleware=[tool_errors()],
    )
    result = await run_agent("weather: object", agent=agent, memory_key="obj", **run_args(fake, store, "byo-object"))
    assert result.status == "succeeded" and (result.model_live, result.tool_live) == (2, 1)
    assert len(memory_items(store, "obj")) == 4
    again = await run_agent("weather: object", agent=agent, memory_key="obj", **run_args(fake, store, "byo-object"))
    assert again.model_replayed == 2 and again.model_live == 0 and again.output == result.output
    assert len(memory_items(store, "obj")) == 4  # the same run scope commits its segment once


async def test_byo_composed_runnable(fake, store):
    """Two agents piped (``a | b``: b continues a's conversation), a runnable that is not a graph."""

    def make(name):
        model = ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0)
        return create_agent(model, tools=[langchain_tool(get_weather)], middleware=[tool_errors()], name=name)

    pipeline = make("researcher") | make("writer")
    result = await run_agent("weather: piped", agent=pipeline, memory_key="piped", **run_args(fake, store, "piped"))
    assert result.status == "succeeded" and result.output == "Done: The weather in Paris is sunny, 21 C."
    assert result.model_live == 3 and len(memory_items(store, "piped")) == 5  # prompt, a's 3 messages, b's answer
    streamed = await run_agent("weather: piped", agent=pipeline, stream=True, **run_args(fake, store, "piped-stream"))
    assert streamed.output == result.output and streamed.model_live == 3  # not a graph: invoked, not streamed
    again = await run_agent("weather: piped", agent=pipeline, memory_key="piped", **run_args(fake, store, "piped"))
    assert again.model_live == 0 and again.model_replayed == 3 and again.output == result.output


async def test_byo_object_not_routed_is_refused_by_the_proxy_when_no_run_is_active(fake):
    """Outside a run, /r/active/ answers 409: a pre-built model never reaches a provider unrecorded."""
    model = ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0)
    with pytest.raises(Exception, match="409|active run"):
        await model.ainvoke("hello")


async def test_declarative_needs_an_openai_model(fake, store):
    with pytest.raises(ConfigError, match="ChatOpenAI"):
        await run_agent("x", model="claude-sonnet-4-5", **run_args(fake, store, "bad"))
    with pytest.raises(ConfigError, match="LangChain agents"):
        await run_agent("x", agent=object(), **run_args(fake, store, "bad2"))


async def test_package_surface():
    assert tether_langchain.ADAPTER.framework == "langchain"
    assert {"ADAPTER", "tool", "run_agent", "run_agent_sync", "MessageHistory"} <= set(dir(tether_langchain))
