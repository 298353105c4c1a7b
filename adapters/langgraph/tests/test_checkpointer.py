"""``TetherCheckpointer`` as a LangGraph ``BaseCheckpointSaver`` (issue 23, item 7): LangGraph's
own conformance suite (``langgraph-checkpoint-conformance``) on a local store and on S3, through
the async API and the sync one; threads kept apart (one graph, two users); ``delete_thread``
durable; every thread the suite left read back from the store by a fresh checkpointer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict, cast

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.message import add_messages

from tests.support.s3 import new_bucket, s3_server, set_aws_env
from tether.agent import AgentSession
from tether.errors import ConfigError
from tether.memory import Memory
from tether.run import Run
from tether.stores import open_store
from tether_langgraph import TetherCheckpointer


@pytest.fixture(scope="module")
def s3_endpoint():
    set_aws_env()
    with s3_server() as url:
        yield url


@pytest.fixture(params=["local", "s3"])
def store_url(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "store")
    endpoint = request.getfixturevalue("s3_endpoint")
    return f"s3://{new_bucket(endpoint)}/tether?endpoint_url={endpoint}"


def _saver(store_url: str, key: str = "own") -> TetherCheckpointer:
    """A run's checkpointer: its session's memory key is ``key`` in namespace ``default``."""
    memory = Memory(open_store(store_url), "default", key)
    return TetherCheckpointer(AgentSession(None, "openai", memory, history=memory.load()))


class _SyncAPI(TetherCheckpointer):
    """The suite drives the async API; this checkpointer answers it with the sync methods."""

    async def aget_tuple(self, config):
        return self.get_tuple(config)

    async def alist(self, config, *, filter=None, before=None, limit=None) -> AsyncIterator[Any]:
        for found in self.list(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(self, config, checkpoint, metadata, new_versions):
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config, writes, task_id, task_path=""):
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id):
        self.delete_thread(thread_id)


def _latest(saver: TetherCheckpointer) -> dict[tuple[str, str], Any]:
    """The newest checkpoint of every (thread, persistent namespace) the saver holds."""
    latest: dict[tuple[str, str], Any] = {}
    for found in saver.list(None):
        conf = found.config["configurable"]
        if ":" not in conf["checkpoint_ns"]:  # a subgraph call's namespace never outlives the run
            latest.setdefault((conf["thread_id"], conf["checkpoint_ns"]), found)
    return latest


@pytest.mark.parametrize("api", ["async", "sync"])
async def test_langgraph_checkpointer_conformance_suite(store_url, api):
    savers: list[TetherCheckpointer] = []
    cls = TetherCheckpointer if api == "async" else _SyncAPI

    @checkpointer_test(name=f"TetherCheckpointer-{api}")
    async def factory():
        memory = Memory(open_store(store_url), "default", "own")
        saver = cls(AgentSession(None, "openai", memory))
        savers.append(saver)
        yield saver

    report = await validate(factory)
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    ran = {name: r.tests_passed for name, r in report.results.items() if r.detected}
    assert set(ran) == {c.value for c in BASE_CAPABILITIES} and sum(ran.values()) == 58, ran

    # What the suite left is committed to the store, one memory key per thread, and a fresh
    # checkpointer reads every thread back as it was.
    read_back = 0
    for saver in savers:  # one per capability (the suite makes one for an undetected one too)
        expected = _latest(saver)
        await saver.aflush()
        fresh = _saver(store_url)
        for (thread_id, ns), want in expected.items():
            got = await fresh.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})
            assert got is not None, (thread_id, ns)
            assert got.checkpoint == want.checkpoint and got.metadata == want.metadata
            assert got.pending_writes == want.pending_writes and got.parent_config == want.parent_config
            read_back += 1
    assert read_back > 40


def _chat_graph(checkpointer, seen: dict[str, list[str]]):
    """A graph with no model: its one node answers the last message and notes every message it
    was shown (what a model would have been sent), per user."""

    def answer(state: MessagesState) -> dict:
        last = state["messages"][-1].content
        assert isinstance(last, str)
        seen.setdefault(last.split()[0], []).extend(str(m.content) for m in state["messages"])
        return {"messages": [AIMessage(f"re: {last}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    return builder.compile(checkpointer=checkpointer)


def _thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _new_items(saver: TetherCheckpointer) -> list[Any]:
    """What the saver's run would commit."""
    assert saver.session is not None
    return saver.session.new_items


async def test_one_graph_two_users_bob_never_sees_alices_messages(store_url):
    """One compiled graph, one checkpointer, two threads: bob's turns are shown only bob's
    messages (on main his thread read back alice's checkpoint), each thread is committed to its
    own memory key, and a later run reads each user's thread alone."""
    seen: dict[str, list[str]] = {}
    saver = _saver(store_url, "alice")
    graph = _chat_graph(saver, seen)
    graph.invoke({"messages": [HumanMessage("alice: my card ends in 4242")]}, _thread("alice"))  # the sync API
    await graph.ainvoke({"messages": [HumanMessage("bob: hello")]}, _thread("bob"))  # the async one
    graph.invoke({"messages": [HumanMessage("bob: what do you know about me?")]}, _thread("bob"))
    assert not any("4242" in m for m in seen["bob:"])
    bob = graph.get_state(_thread("bob")).values["messages"]
    assert [m.content for m in bob] == [
        "bob: hello",
        "re: bob: hello",
        "bob: what do you know about me?",
        "re: bob: what do you know about me?",
    ]
    assert graph.get_state(_thread("bob")).config["configurable"]["thread_id"] == "bob"
    assert len(list(graph.get_state_history(_thread("bob")))) == len(list(saver.list(_thread("bob")))) > 0
    assert all(s.config["configurable"]["thread_id"] == "bob" for s in graph.get_state_history(_thread("bob")))

    # Committed as the run commits: alice's thread (the session's key) through session.new_items,
    # bob's to its own key; neither key holds the other's words.
    await saver.aflush()
    store = open_store(store_url)
    Memory(store, "default", "alice").commit(_new_items(saver), writer="run-1")
    alice_items, bob_items = Memory(store, "default", "alice").load(), Memory(store, "default", "bob").load()
    # The whole phrase: "4242" alone turns up by chance in a checkpoint's ids and encoded blobs.
    secret = "my card ends in 4242"
    assert secret in json.dumps(alice_items) and "bob:" not in json.dumps(alice_items)
    assert "bob: hello" in json.dumps(bob_items) and secret not in json.dumps(bob_items)

    # A later run (bob's memory key) continues bob's thread only; alice's is there for her.
    seen.clear()
    later = _chat_graph(_saver(store_url, "bob"), seen)
    later.invoke({"messages": [HumanMessage("bob: again")]}, _thread("bob"))
    assert seen["bob:"][:4] == [m.content for m in bob] and not any("4242" in m for m in seen["bob:"])
    assert [m.content for m in later.get_state(_thread("alice")).values["messages"]] == [
        "alice: my card ends in 4242",
        "re: alice: my card ends in 4242",
    ]


async def test_delete_thread_is_committed_and_a_later_run_starts_empty(store_url):
    """``delete_thread`` on the run's own key and on another: each thread reads empty at once,
    the deletion is committed with the run's items, and a later run sees only what came after."""
    store = open_store(store_url)
    seen: dict[str, list[str]] = {}
    first = _saver(store_url, "carol")
    graph = _chat_graph(first, seen)
    for user in ("carol", "dave"):
        graph.invoke({"messages": [HumanMessage(f"{user}: secret one")]}, _thread(user))
    first.flush()
    Memory(store, "default", "carol").commit(_new_items(first), writer="run-1")

    second = _saver(store_url, "carol")
    graph = _chat_graph(second, seen)
    assert graph.get_state(_thread("dave")).values["messages"]  # read from dave's key
    for user in ("carol", "dave"):
        await second.adelete_thread(user)
        assert graph.get_state(_thread(user)).values == {} and list(second.list(_thread(user))) == []
    graph.invoke({"messages": [HumanMessage("carol: fresh start")]}, _thread("carol"))
    second.flush()
    Memory(store, "default", "carol").commit(_new_items(second), writer="run-2")

    seen.clear()
    third = _chat_graph(_saver(store_url, "carol"), seen)
    third.invoke({"messages": [HumanMessage("carol: who am I?")]}, _thread("carol"))
    assert seen["carol:"] == ["carol: fresh start", "re: carol: fresh start", "carol: who am I?"]
    assert third.get_state(_thread("dave")).values == {}
    # Append-only memory: the first run's segment is still in the store, unread (README).
    assert "secret one" in json.dumps(Memory(store, "default", "carol").load())


async def test_another_threads_commit_is_made_once_across_a_retry(store_url):
    """A run whose graph also served bob (not its own key) commits bob's thread at flush; the
    attempt then dies before the run's own commit. The retry reads bob's key as the first
    attempt did (its own segment left out) and commits the same segment: bob's turn is stored
    once, and a later reader sees it once."""
    store = open_store(store_url)

    async def attempt() -> tuple[TetherCheckpointer, dict[str, list[str]]]:
        run = Run("run-bob", store)
        memory = Memory(store, "default", "alice")
        saver = TetherCheckpointer(AgentSession(run, "openai", memory, history=memory.load(writer=run.scope)))
        seen: dict[str, list[str]] = {}
        graph = _chat_graph(saver, seen)
        await graph.ainvoke({"messages": [HumanMessage("alice: hi")]}, _thread("alice"))
        await graph.ainvoke({"messages": [HumanMessage("bob: hello")]}, _thread("bob"))
        await saver.aflush()
        await run.aclose()
        return saver, seen

    await attempt()  # killed before run_agent commits alice's items: nothing of alice's is stored
    assert Memory(store, "default", "alice").load() == []
    retry, seen = await attempt()
    assert seen["bob:"] == ["bob: hello"]  # bob's thread as the first attempt found it
    Memory(store, "default", "alice").commit(_new_items(retry), writer="run-bob")
    bob_items = Memory(store, "default", "bob").load()
    assert len(bob_items) == 1 and json.dumps(bob_items).count('"bob: hello"') == 1
    later = _chat_graph(_saver(store_url, "alice"), {})
    assert [m.content for m in later.get_state(_thread("bob")).values["messages"]] == ["bob: hello", "re: bob: hello"]
    assert [m.content for m in later.get_state(_thread("alice")).values["messages"]] == ["alice: hi", "re: alice: hi"]


def test_a_thread_id_that_is_no_memory_key_is_refused_with_its_name(tmp_path):
    graph = _chat_graph(_saver(str(tmp_path / "store")), {})
    with pytest.raises(ConfigError, match="invalid memory key 'user/1'"):
        graph.invoke({"messages": [HumanMessage("x: hi")]}, _thread("user/1"))


def test_history_without_a_memory_key_is_refused():
    with pytest.raises(ConfigError, match="needs its memory"):
        TetherCheckpointer(AgentSession(None, "openai", history=[{"ns": ""}]))


def _add_each(state: list, writes: list) -> list:
    for write in writes:
        state = cast(list, add_messages(state, write))
    return state


class DeltaMessages(TypedDict):
    """Messages in LangGraph's beta ``DeltaChannel``: checkpoints hold a sentinel, not the value."""

    messages: Annotated[list, DeltaChannel(_add_each)]


async def test_a_delta_channel_is_refused_not_committed_without_its_value(tmp_path):
    """A graph compiled with TetherCheckpointer itself whose ``messages`` is a ``DeltaChannel``:
    memory would keep checkpoints without the messages (their value lives in the ancestors'
    writes), so the first checkpoint is refused with an error naming the channel, and nothing is
    committed."""
    builder = StateGraph(DeltaMessages)
    builder.add_node("echo", lambda state: {"messages": [AIMessage("echo")]})
    builder.add_edge(START, "echo")
    saver = _saver(str(tmp_path / "store"), "delta")
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(ConfigError, match=r"DeltaChannel 'messages' \(thread 'delta'\).*plain reducer channel"):
        await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "delta"}})
    saver.flush()
    assert Memory(open_store(str(tmp_path / "store")), "default", "delta").load() == []
