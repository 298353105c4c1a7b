"""Memory keyed by namespace + memoryKey (README.md, "How it works": Memory), on both stores for real.

Crashes and races are made deterministic by a store wrapper whose hooks run before each call:
one raises (the process dies between the segment write and the HEAD update), another holds
writers at a barrier so that both read the same HEAD before either writes it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterable

import pytest

from tether.errors import ConfigError
from tether.memory import Memory
from tether.stores import Store, open_store


class Died(BaseException):
    """The process died here (a BaseException: nothing in the code under test catches it)."""


class Hooked(Store):
    """Delegates to ``inner``; ``hook(op, key)`` runs before every call."""

    def __init__(self, inner: Store, hook: Callable[[str, str], None]) -> None:
        self.inner, self.hook, self.url = inner, hook, inner.url

    def get(self, key):
        self.hook("get", key)
        return self.inner.get(key)

    def get_versioned(self, key):
        self.hook("get_versioned", key)
        return self.inner.get_versioned(key)

    def put(self, key, data):
        self.hook("put", key)
        return self.inner.put(key, data)

    def create(self, key, data):
        self.hook("create", key)
        return self.inner.create(key, data)

    def replace(self, key, data, version):
        self.hook("replace", key)
        return self.inner.replace(key, data, version)

    def write_if(self, key, data, version):
        self.hook("write_if", key)
        return self.inner.write_if(key, data, version)

    def list(self, prefix):
        self.hook("list", prefix)
        return self.inner.list(prefix)

    def delete(self, key):
        self.hook("delete", key)
        return self.inner.delete(key)

    def get_many(self, keys: Iterable[str]):
        return self.inner.get_many(keys)


def turn(run: str, text: str) -> list[dict]:
    return [{"role": "user", "content": text, "run": run}, {"role": "assistant", "content": f"re: {text}", "run": run}]


def test_two_runs_share_memory(store_url):
    store = open_store(store_url)
    first = Memory(store, "team-a", "support-chat")
    assert first.load() == []
    first.commit(turn("run-1", "hello"), writer="run-1")
    # A later run, another process, another Memory object: same namespace + key, same memory.
    second = Memory(open_store(store_url), "team-a", "support-chat")
    assert second.load(writer="run-2") == turn("run-1", "hello")
    second.commit(turn("run-2", "again"), writer="run-2")
    assert Memory(store, "team-a", "support-chat").load() == turn("run-1", "hello") + turn("run-2", "again")
    # Append-only segments: one object per committed run, plus the head.
    assert len(store.list("memory/team-a/support-chat/segments/")) == 2


@pytest.mark.parametrize("dies_at", ["create", "replace"])
def test_crash_after_the_segment_write_commits_once_on_retry(store_url, dies_at):
    store = open_store(store_url)
    memory = Memory(store, "ns", "k")
    memory.commit(turn("run-0", "earlier"), writer="run-0")  # so HEAD exists for the "replace" case
    if dies_at == "create":  # HEAD absent: the first commit of this key creates it
        memory = Memory(store, "ns", "fresh")

    def die_on_head(op: str, key: str) -> None:
        if key.endswith("/HEAD") and op in ("create", "replace"):
            raise Died()

    with pytest.raises(Died):
        Memory(Hooked(store, die_on_head), memory.namespace, memory.key).commit(turn("run-1", "hi"), writer="run-1")
    assert store.list(f"{memory.prefix}segments/"), "the segment was not written before the crash"
    before = memory.load()
    assert turn("run-1", "hi")[0] not in before, "an uncommitted segment is visible"

    # The retry of run-1 sees the memory its first attempt saw, then commits: once.
    assert memory.load(writer="run-1") == before
    memory.commit(turn("run-1", "hi"), writer="run-1")
    memory.commit(turn("run-1", "hi"), writer="run-1")  # and a crash after the commit, retried again
    assert memory.load() == before + turn("run-1", "hi")
    assert memory._head()[0].count(Memory.segment_id("run-1")) == 1


@pytest.mark.parametrize("head_exists", [False, True], ids=["create-race", "replace-race"])
def test_two_concurrent_writers_both_land(store_url, head_exists):
    store = open_store(store_url)
    if head_exists:
        Memory(store, "ns", "k").commit(turn("run-0", "base"), writer="run-0")
    barrier = threading.Barrier(2, timeout=10)
    seen = threading.local()

    def meet_after_first_head_read(op: str, key: str) -> None:
        if op == "get_versioned" and key.endswith("/HEAD") and not getattr(seen, "done", False):
            seen.done = True
            # Read HEAD, then wait: both writers now hold the same version.
            barrier.wait()

    class ReadThenMeet(Hooked):
        def get_versioned(self, key):
            found = self.inner.get_versioned(key)
            self.hook("get_versioned", key)
            return found

    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            Memory(ReadThenMeet(store, meet_after_first_head_read), "ns", "k").commit(turn(name, name), writer=name)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("run-1", "run-2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    items = Memory(store, "ns", "k").load()
    for name in ("run-1", "run-2"):
        assert items.count(turn(name, name)[0]) == 1, f"{name}'s turn was lost or duplicated: {items}"
    assert len(items) == 4 + (2 if head_exists else 0)


def test_many_concurrent_writers_all_land(store_url):
    store = open_store(store_url)
    names = [f"run-{i}" for i in range(8)]
    threads = [threading.Thread(target=lambda n=n: Memory(open_store(store_url), "ns", "busy").commit(turn(n, n), writer=n)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    items = Memory(store, "ns", "busy").load()
    assert sorted(i["run"] for i in items if i["role"] == "user") == names


def test_namespaces_and_keys_are_isolated(store_url):
    store = open_store(store_url)
    Memory(store, "team-a", "chat").commit(turn("a", "secret plan"), writer="a")
    Memory(store, "team-b", "chat").commit(turn("b", "other"), writer="b")
    Memory(store, "team-a", "notes").commit(turn("c", "notes"), writer="c")
    assert Memory(store, "team-a", "chat").load() == turn("a", "secret plan")
    assert Memory(store, "team-b", "chat").load() == turn("b", "other")
    assert Memory(store, "team-a", "notes").load() == turn("c", "notes")
    assert Memory(store, "team-c", "chat").load() == []
    for namespace, key in (("..", "chat"), ("team-a/../team-b", "chat"), ("team-a", "../team-b"), ("team-a", "a/b"), ("", "k")):
        with pytest.raises(ConfigError):
            Memory(store, namespace, key)


def test_load_with_writer_excludes_that_writers_segment(store_url):
    store = open_store(store_url)
    memory = Memory(store, "ns", "k")
    memory.commit(turn("run-1", "one"), writer="run-1")
    memory.commit(turn("run-2", "two"), writer="run-2")
    memory.commit(turn("run-3", "three"), writer="run-3")
    assert memory.load(writer="run-2") == turn("run-1", "one") + turn("run-3", "three")
    assert memory.load(writer="run-9") == memory.load() == turn("run-1", "one") + turn("run-2", "two") + turn("run-3", "three")
    assert memory.commit([], writer="run-4") is None and memory.load(writer="run-4") == memory.load()


NOTE_SCRIPT = {
    "conversations": [{"match": "memory:", "turns": [{"tool_calls": [{"name": "note", "arguments": {"text": "x"}}]}, {"text": "Noted."}]}]
}


@pytest.mark.parametrize("writers", [2, 5, 20])
async def test_concurrent_runs_on_one_memory_key_on_s3_lose_nothing(s3_store_url, writers):
    """Issue 8 item 9, core: N runs through ``run_agent`` (a real SDK over real HTTP) commit to one
    memory key on S3 at once; a later run's request to the provider carries every turn once."""
    from tests.core.chat_adapter import ADAPTER
    from tether.agent import run_agent, tool
    from tether.testing import FakeProvider

    @tool
    async def note(text: str) -> str:
        """Write a note down."""
        return f"noted {text}"

    with FakeProvider(NOTE_SCRIPT, seed=2) as fake:
        common = dict(
            model="gpt-4o-mini", tools=[note], memory_key="shared", store=s3_store_url, upstreams={"openai": fake.url + "/openai"}
        )
        prompts = [f"memory: writer {i} says hello" for i in range(writers)]
        results = await asyncio.gather(*(run_agent(ADAPTER, p, run_id=f"w{i}", **common) for i, p in enumerate(prompts)))
        assert [r.status for r in results] == ["succeeded"] * writers
        fake.ledger.clear()
        final = await run_agent(ADAPTER, "memory: who said hello?", run_id="reader", **common)
        assert final.status == "succeeded"
        sent = json.loads(fake.ledger[0].body)["messages"]
    users = [m["content"] for m in sent if m["role"] == "user"]
    assert sorted(users[:-1]) == sorted(prompts) and users[-1] == "memory: who said hello?"
    assert sum(m["role"] == "tool" for m in sent) == writers
    assert [m["content"] for m in sent if m["role"] == "assistant" and not m.get("tool_calls")] == ["Noted."] * writers
