"""The LangGraph adapter against the fake provider over real HTTP: the declarative graph's turns
and tools journaled and replayed, memory as a checkpointer thread over the store (deltas, once per
turn, nothing after a crash), bring-your-own graphs routed through the proxy, streaming, tool
errors through ToolNode."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, TypedDict, cast

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

import tether_langgraph
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
from tether.agent import AgentSession
from tether.memory import Memory
from tether.stores import open_store
from tether_langgraph import TetherCheckpointer, agent_graph, langchain_tool, openai_base_url, run_agent

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


async def test_the_wire_body_is_what_a_langgraph_user_sends(fake, store):
    """Chat Completions with the tools' schemas built by LangChain from the functions, the
    instructions as a system message, and no LangChain ids or run ids anywhere."""
    await run_agent("multi: weather?", model="gpt-4o-mini", tools=TOOLS, instructions="Be brief.", **run_args(fake, store, "body"))
    body = records(store, "body")[0].request["body"]
    assert body["model"] == "gpt-4o-mini" and body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1] == {"role": "user", "content": "multi: weather?"}
    schemas = {t["function"]["name"]: t["function"] for t in body["tools"]}
    assert schemas["get_weather"]["parameters"]["properties"] == {"city": {"type": "string"}}
    assert schemas["get_weather"]["description"] == "Get the current weather in a city."
    assert "lc_run" not in json.dumps(body) and "run_id" not in json.dumps(body)


async def test_tool_error_becomes_an_error_tool_message(fake, store):
    result = await run_agent("broken: go", model="gpt-4o-mini", tools=TOOLS, memory_key="err", **run_args(fake, store, "broken"))
    assert result.status == "succeeded"
    assert result.output == "The tool said: Error: tool broken failed: RuntimeError: the backend is down (test)"
    state = _reader(store, "err")
    messages = state.get_tuple({"configurable": {"thread_id": "err"}}).checkpoint["channel_values"]["messages"]
    [tool_message] = [m for m in messages if isinstance(m, ToolMessage)]
    assert tool_message.status == "error" and "the backend is down" in tool_message.content
    again = await run_agent("broken: go", model="gpt-4o-mini", tools=TOOLS, **run_args(fake, store, "broken"))
    assert again.output == result.output and calls == ["broken"]


def _memory(store, key):
    """The committed items under a memory key, in commit order."""
    return Memory(open_store(store), "default", key).load()


def _reader(store, key):
    """A checkpointer over a memory key's committed thread (``thread_id`` = the key)."""
    memory = Memory(open_store(store), "default", key)
    return TetherCheckpointer(AgentSession(None, "openai", memory, history=memory.load()))


async def test_memory_is_a_checkpointer_thread_stored_as_deltas(fake, store):
    first = await run_agent("memory: my name is Ada", model="gpt-4o-mini", tools=TOOLS, memory_key="ada", **run_args(fake, store, "m1"))
    second = await run_agent("memory: what is my name?", model="gpt-4o-mini", tools=TOOLS, memory_key="ada", **run_args(fake, store, "m2"))
    assert first.output == second.output == "Noted."
    # The second run's first request carries the first run's whole conversation.
    sent = records(store, "m2")[0].request["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[0]["content"] == "memory: my name is Ada" and sent[-1]["content"] == "memory: what is my name?"
    # Two segments; each message stored once, in the segment of the run that added it.
    items = _memory(store, "ada")
    assert len(items) == 2 and all(item["ns"] == "" for item in items)
    raw = json.dumps(items)
    assert raw.count("my name is Ada") == 1 and raw.count("what is my name?") == 1
    assert "set" in items[0]["channels"]["messages"] or "extend" in items[0]["channels"]["messages"]
    assert list(items[1]["channels"]["messages"]) == ["extend"]
    # The thread rebuilt from memory is the graph's state: 6 messages, in order.
    saver = _reader(store, "ada")
    found = saver.get_tuple({"configurable": {"thread_id": "ada"}})
    messages = found.checkpoint["channel_values"]["messages"]
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, ToolMessage, AIMessage, HumanMessage, AIMessage]
    assert found.config["configurable"]["checkpoint_id"] == items[1]["id"]
    assert len(list(saver.list({"configurable": {"thread_id": "ada"}}))) == 2


async def test_a_crashed_attempt_commits_nothing_and_its_retry_commits_once(fake, store):
    flaky_state["fail"] = True
    script_prompt = "memory: remember Ada"
    with pytest.raises(Flaky):
        await run_agent(script_prompt, model="gpt-4o-mini", tools=[flaky_tool()], memory_key="crash", **run_args(fake, store, "c1"))
    assert _memory(store, "crash") == []
    flaky_state["fail"] = False
    done = await run_agent(script_prompt, model="gpt-4o-mini", tools=[flaky_tool()], memory_key="crash", **run_args(fake, store, "c1"))
    assert done.status == "succeeded" and done.model_replayed == 1  # the first turn was not paid twice
    items = _memory(store, "crash")
    assert len(items) == 1 and json.dumps(items).count("remember Ada") == 1


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
    sys.modules.pop("lg_byo_graphs", None)
    yield
    sys.modules.pop("lg_byo_graphs", None)


async def test_byo_import_path_is_routed_through_the_proxy(fake, store, fresh_byo_module, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/unreachable")  # restored after the import
    result = await run_agent("weather: Paris?", agent="lg_byo_graphs:graph", **run_args(fake, store, "byo-path"))
    assert result.status == "succeeded" and result.output == "Done: The weather in Paris is sunny."
    assert (result.model_live, result.tool_live) == (2, 1) and fake.live_calls() == 2
    assert "OPENAI_BASE_URL" not in os.environ and os.environ["OPENAI_API_BASE"] == "http://127.0.0.1:9/unreachable"
    import lg_byo_graphs

    assert lg_byo_graphs.graph is not None
    again = await run_agent("weather: Paris?", agent="lg_byo_graphs:graph", **run_args(fake, store, "byo-path"))
    assert again.output == result.output and again.model_replayed == 2 and fake.live_calls() == 2


async def test_byo_without_durability_is_not_routed(fake, store, fresh_byo_module, monkeypatch):
    """``durable=False``: no run, no proxy; the user's model goes where its own settings say."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url("openai"))
    result = await run_agent("weather: direct", agent="lg_byo_graphs:graph", durable=False, store=store)
    assert result.status == "succeeded" and result.output == "Done: The weather in Paris is sunny."
    assert fake.live_calls() == 2 and not (Path(store) / "journal").exists()


async def test_byo_factory_and_own_checkpointer(fake, store, fresh_byo_module):
    made = await run_agent("weather: factory", agent="lg_byo_graphs:make_graph", **run_args(fake, store, "byo-factory"))
    assert made.status == "succeeded" and made.model_live == 2
    # A graph compiled with the user's own checkpointer runs on Tether's (thread = memory key).
    saved = await run_agent("weather: saver", agent="lg_byo_graphs:with_saver", memory_key="saver", **run_args(fake, store, "byo-saver"))
    assert saved.status == "succeeded"
    assert len(_memory(store, "saver")) == 1
    # ... and without a memory key, each attempt gets an empty thread of its own.
    import lg_byo_graphs

    for run_id in ("byo-saver-2", "byo-saver-3"):
        r = await run_agent("weather: saver", agent=lg_byo_graphs.with_saver, **run_args(fake, store, run_id))
        assert r.status == "succeeded" and len(records(store, run_id)[0].request["body"]["messages"]) == 1


async def test_byo_object_built_on_the_proxy_url(fake, store):
    """A graph object built before the run, its model on ``openai_base_url()``."""
    tools = [langchain_tool(get_weather)]
    graph = agent_graph(ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0), tools, name="mine")
    result = await run_agent("weather: object", agent=graph, **run_args(fake, store, "byo-object"))
    assert result.status == "succeeded" and (result.model_live, result.tool_live) == (2, 1)
    again = await run_agent("weather: object", agent=graph, **run_args(fake, store, "byo-object"))
    assert again.model_replayed == 2 and again.model_live == 0 and again.output == result.output


async def test_byo_object_not_routed_is_refused_by_the_proxy_when_no_run_is_active(fake):
    """Outside a run, /r/active/ answers 409: a pre-built model never reaches a provider unrecorded."""
    model = ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0)
    with pytest.raises(Exception, match="409|active run"):
        await model.ainvoke("hello")


async def test_not_a_graph_is_a_config_error(fake, store):
    from tether.errors import ConfigError

    with pytest.raises(ConfigError, match="compiled LangGraph graphs"):
        await run_agent("x", agent=object(), **run_args(fake, store, "bad"))


async def test_package_surface():
    assert tether_langgraph.ADAPTER.framework == "langgraph"
    assert {"ADAPTER", "tool", "run_agent", "run_agent_sync", "TetherCheckpointer"} <= set(dir(tether_langgraph))


def _add_each(state: list, writes: list) -> list:
    """A ``DeltaChannel`` batch reducer: ``add_messages`` over each write in turn."""
    for write in writes:
        state = cast(list, add_messages(state, write))
    return state


class DeltaMessages(TypedDict):
    messages: Annotated[list, DeltaChannel(_add_each)]


def delta_graph(tools):
    """The agent loop over a state whose ``messages`` is LangGraph's beta ``DeltaChannel`` (only a
    sentinel in checkpoints, the value rebuilt from ancestors' writes)."""
    model = ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url(), max_retries=0).bind_tools(tools)

    async def agent(state: DeltaMessages) -> dict:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(DeltaMessages)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name="delta")


async def test_a_delta_channel_graph_keeps_its_memory(fake, store):
    """A bring-your-own graph whose messages live in a ``DeltaChannel``: the second run with the
    same memory key sees the first run's conversation (the run's graph holds the value in every
    checkpoint), stored once, as for any graph. The user's graph keeps its DeltaChannel."""

    graph = delta_graph([langchain_tool(lookup)])
    first = await run_agent("memory: my name is Ada", agent=graph, memory_key="delta", **run_args(fake, store, "d1"))
    second = await run_agent("memory: what is my name?", agent=graph, memory_key="delta", **run_args(fake, store, "d2"))
    assert first.status == second.status == "succeeded" and second.output == "Noted."
    sent = records(store, "d2")[0].request["body"]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[0]["content"] == "memory: my name is Ada"
    raw = json.dumps(_memory(store, "delta"))
    assert raw.count("my name is Ada") == 1 and raw.count("what is my name?") == 1
    assert isinstance(graph.channels["messages"], DeltaChannel)
