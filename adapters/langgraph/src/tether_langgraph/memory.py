"""A LangGraph checkpointer over a Tether memory key.

LangGraph keeps a conversation in a *thread* of checkpoints. :class:`TetherCheckpointer` is a
``BaseCheckpointSaver`` whose threads are memory keys (``thread_id`` = the key, in the run's
namespace; ``run_agent`` names the run's ``memory_key``). A thread is rebuilt from the items
committed by earlier runs (``AgentSession.history`` for the run's own key, the store for any
other) and this run's checkpoints stay in memory until the run succeeds. Then, for each
namespace that outlives a run (the root graph, ``checkpointer=True`` subgraphs), the run's last
checkpoint goes to ``AgentSession.new_items`` — as a *delta* against the checkpoint the run
started from — and ``run_agent`` commits it as one segment (another thread's items are committed
to its own key by :meth:`TetherCheckpointer.flush`, under the same writer):

    memory/<namespace>/<key>/segments/<run>
        [{"ns": "", "id": ..., "parent": ..., "checkpoint": [type, b64],   # versions, no values
          "channels": {"messages": {"extend": [...the run's new messages...]}, "x": {"set": ...}},
          "removed": [...], "metadata": [type, b64], "writes": [...]}]

A channel whose list grew (``messages`` under ``add_messages``) stores only the new items; one
that changed otherwise stores its new value; an unchanged one stores nothing. So each message is
stored once, in the segment of the run that added it — never the whole thread again. Values are
LangChain's JSON (``dumpd``, readable, revived by the graph's own serde) when that round-trips
exactly, else the serde's typed bytes in base64.

A crashed attempt commits nothing; its successful retry commits once (the segment id comes from
the run scope). Concurrent runs on one key merge at the item level, never last-writer-wins: a
list channel (``messages``) always commits the items it appended — even when the thread was
empty when the run started — so every run's turns are kept, in commit order; a run that rewrote
a list (trimmed, summarised) sets its list and keeps the items other runs appended after its
starting point (each item records the checkpoint it started from as ``base``). Scalar channels
take the value of the last commit.

``delete_thread`` empties a thread at once and commits ``{"deleted": true}`` before the run's
items: folding it drops everything committed before it (memory is append-only, so the earlier
segments stay in the store, unread).

LangGraph's beta ``DeltaChannel`` keeps its value out of checkpoints (a sentinel; the value is
rebuilt from the ancestor chain's writes, which memory does not keep): ``run_agent`` runs a graph
with a memory key on a copy whose delta channels are plain reducer channels
(:func:`without_delta_channels`, the value in every checkpoint); anything else that would commit
a checkpoint of one (a graph given to this class directly, a ``checkpointer=True`` subgraph with
one) is refused with a ``ConfigError`` naming the channel, never committed without its value.
Not supported: time travel to checkpoints inside an earlier run (only each run's last checkpoint
is kept).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.load import dumpd
from langchain_core.runnables import RunnableConfig
from langgraph.channels.binop import BinaryOperatorAggregate
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.pregel import Pregel

from tether.agent import AgentSession
from tether.errors import ConfigError
from tether.memory import Memory

#: LangGraph's separator between a node name and its task id in a checkpoint namespace. A
#: namespace with a task id in it belongs to one subgraph call and never outlives the run.
NS_END = ":"

Typed = tuple[str, bytes]
#: (task_id, channel, value, task_path, idx)
Write = tuple[str, str, Typed, str, int]


@dataclass
class _Entry:
    """One checkpoint: serialised (this run's, as LangGraph put it) or rebuilt from memory."""

    ns: str
    id: str
    metadata: Typed
    parent: str | None = None
    writes: list[Write] = field(default_factory=list)
    #: A checkpoint put during this run, serialised whole.
    typed: Typed | None = None
    #: A committed checkpoint: the checkpoint without values, and the values rebuilt by folding.
    head: Typed | None = None
    values: dict[str, Any] | None = None


def _b64(typed: Typed) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode()]


def _unb64(pair: Sequence[str]) -> Typed:
    return pair[0], base64.b64decode(pair[1])


@dataclass
class _Thread:
    """One thread's checkpoints: committed (folded from memory) and this run's (in memory)."""

    # Both mutated in place, never rebound: LangGraph hands the graph a shallow copy of the saver
    # (``with_allowlist``) and both copies must see the same entries.
    committed: dict[str, list[_Entry]] = field(default_factory=dict)
    pending: dict[str, dict[str, _Entry]] = field(default_factory=dict)
    #: ``delete_thread`` was called since the last flush: the next commit starts with a tombstone.
    deleted: bool = False


#: The memory item ``delete_thread`` commits: folding it drops everything committed before it.
TOMBSTONE = {"deleted": True}


def _refuse_delta_channels(thread_id: str, ns: str, checkpoint: Checkpoint, metadata: CheckpointMetadata) -> None:
    """A checkpoint memory would keep must hold every channel's value: a ``DeltaChannel``'s is
    not in it (LangGraph counts its writes since a snapshot in the metadata, or puts a snapshot
    in the values)."""
    names = set(metadata.get("counters_since_delta_snapshot") or ())
    names |= {k for k, v in (checkpoint.get("channel_values") or {}).items() if isinstance(v, _DeltaSnapshot)}
    if names:
        where = f"namespace {ns!r} of thread {thread_id!r}" if ns else f"thread {thread_id!r}"
        raise ConfigError(
            f"TetherCheckpointer cannot keep the DeltaChannel {', '.join(repr(n) for n in sorted(names))} ({where}): its value "
            "is rebuilt from every earlier checkpoint's writes, which memory does not keep. Declare it as a plain reducer "
            "channel (e.g. Annotated[list, add_messages]) or run the graph with tether_langgraph.run_agent, which gives a "
            "run's top-level graph plain channels"
        )


def _one_batch(reducer: Callable[[Any, list[Any]], Any], current: Any, update: Any) -> Any:
    """A ``DeltaChannel`` batch reducer as a pairwise one (it is batching-invariant by contract)."""
    return reducer(current, [update])


def without_delta_channels(graph: Pregel[Any]) -> Pregel[Any]:
    """A copy of ``graph`` whose ``DeltaChannel`` channels are plain reducer channels over the same
    reducer, so every checkpoint holds their value (``graph`` itself when it has none)."""
    if not any(isinstance(ch, DeltaChannel) for ch in graph.channels.values()):
        return graph
    channels = dict(graph.channels)
    for name, ch in graph.channels.items():
        if isinstance(ch, DeltaChannel):
            plain = BinaryOperatorAggregate(ch.typ, functools.partial(_one_batch, ch.reducer))
            plain.key = name
            channels[name] = plain
    return graph.copy(update={"channels": channels})


class TetherCheckpointer(BaseCheckpointSaver[int]):
    """A checkpointer whose threads live in Tether memory: ``thread_id`` is a memory key.

    Give it the run's :class:`~tether.agent.AgentSession`: the session's own thread (its memory
    key) starts from ``session.history``; any other ``thread_id`` is the memory key of that name
    in the same namespace, read from the store when first used. :meth:`flush` (called by the
    adapter once the graph finished) turns this run's final checkpoints into delta items: the
    session's thread's go to ``session.new_items`` (``run_agent`` commits them), another
    thread's are committed to its own key, under the same writer (the run scope), so a retry
    commits nothing twice. Without a session (or memory) every thread is kept in this instance
    only — what a graph that needs a checkpointer gets when no ``memory_key`` is given.
    """

    def __init__(self, session: AgentSession | None = None, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.session = session
        memory = session.memory if session is not None else None
        if session is not None and session.history and memory is None:
            raise ConfigError("TetherCheckpointer: a session with history needs its memory (the key names the thread)")
        self._threads: dict[str, _Thread] = {}
        if memory is not None:
            self._threads[memory.key] = self._rebuilt(session.history if session is not None else [])

    # -- threads -----------------------------------------------------------------------------------
    def _memory(self, thread_id: str) -> Memory | None:
        """The memory key holding ``thread_id`` (``None``: this instance keeps it in memory only)."""
        own = self.session.memory if self.session is not None else None
        if own is None or thread_id == own.key:
            return own
        return Memory(own.store, own.namespace, thread_id)  # a bad key name is a ConfigError naming it

    def _scope(self) -> str | None:
        run = self.session.run if self.session is not None else None
        return run.scope if run is not None else None

    def _thread(self, thread_id: str) -> _Thread:
        """The thread, read from its memory key the first time it is used."""
        found = self._threads.get(thread_id)
        if found is None:
            memory = self._memory(thread_id)
            # A retry reads what its first attempt read (``writer``): not its own earlier commit.
            items = memory.load(writer=self._scope()) if memory is not None else []
            found = self._threads.setdefault(thread_id, self._rebuilt(items))
        return found

    async def _athread(self, thread_id: str) -> _Thread:
        if thread_id in self._threads:
            return self._threads[thread_id]
        return await asyncio.to_thread(self._thread, thread_id)  # store reads off the event loop

    def _rebuilt(self, items: Sequence[dict[str, Any]]) -> _Thread:
        thread = _Thread()
        for item in items:
            self._fold(thread, item)
        return thread

    # -- memory items ------------------------------------------------------------------------------
    def _fold(self, thread: _Thread, item: dict[str, Any]) -> None:
        """Apply one committed item on top of its namespace's latest checkpoint."""
        if item.get("deleted"):
            thread.committed.clear()  # delete_thread: what was committed before it is gone
            return
        ns = item["ns"]
        entries = thread.committed.setdefault(ns, [])
        values = dict(entries[-1].values or {}) if entries else {}
        for name in item.get("removed", []):
            values.pop(name, None)
        base = _base_values(entries, item)
        for name, change in item.get("channels", {}).items():
            if "extend" in change:
                values[name] = [*values.get(name, []), *self._decode(change["extend"])]
                continue
            value = self._decode(change["set"])
            current, started = values.get(name), base.get(name, [])
            if (
                isinstance(value, list)
                and isinstance(current, list)
                and isinstance(started, list)
                and _same(current[: len(started)], started)
            ):
                # A rewritten list (trimmed, summarised) keeps what concurrent runs appended
                # after this run's starting point: a commit never drops another run's turn.
                value = [*value, *current[len(started) :]]
            values[name] = value
        entries.append(
            _Entry(
                ns=ns,
                id=item["id"],
                parent=item.get("parent"),
                metadata=_unb64(item["metadata"]),
                writes=[(t, c, _unb64([vt, vb]), p, i) for t, c, vt, vb, p, i in item.get("writes", [])],
                head=_unb64(item["checkpoint"]),
                values=values,
            )
        )

    def _encode(self, value: Any) -> dict[str, Any]:
        """LangChain's JSON when it revives to an equal value (readable, greppable), else typed bytes."""
        try:
            data = json.dumps(dumpd(value))
            if self.serde.loads_typed(("json", data.encode())) == value:
                return {"json": json.loads(data)}
        except Exception:
            pass
        return {"typed": _b64(self.serde.dumps_typed(value))}

    def _decode(self, encoded: dict[str, Any]) -> Any:
        if "json" in encoded:
            return self.serde.loads_typed(("json", json.dumps(encoded["json"]).encode()))
        return self.serde.loads_typed(_unb64(encoded["typed"]))

    def _item(self, thread: _Thread, entry: _Entry) -> dict[str, Any]:
        """This run's checkpoint as a delta against the thread's committed state."""
        assert entry.typed is not None
        checkpoint = dict(self.serde.loads_typed(entry.typed))
        values: dict[str, Any] = checkpoint.pop("channel_values", {}) or {}
        base_entries = thread.committed.get(entry.ns) or []
        base = (base_entries[-1].values or {}) if base_entries else {}
        channels: dict[str, Any] = {}
        for name, value in values.items():
            old = base.get(name, _MISSING)
            if old is not _MISSING and _same(old, value):
                continue
            if old is _MISSING and isinstance(value, list):
                old = []  # a new list channel grows from nothing: appended, never set over others
            if isinstance(old, list) and isinstance(value, list) and len(value) >= len(old) and _same(value[: len(old)], old):
                channels[name] = {"extend": self._encode(value[len(old) :])}
            else:
                channels[name] = {"set": self._encode(value)}
        return {
            "ns": entry.ns,
            "id": entry.id,
            "parent": entry.parent,
            "base": base_entries[-1].id if base_entries else None,
            "checkpoint": _b64(self.serde.dumps_typed(checkpoint)),
            "channels": channels,
            "removed": sorted(name for name in base if name not in values),
            "metadata": _b64(entry.metadata),
            "writes": [[t, c, *_b64(v), p, i] for t, c, v, p, i in entry.writes],
        }

    def new_items(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """A thread's memory items for this run (default: the session's own thread): a tombstone
        if it was deleted, then its last checkpoint in each namespace that outlives a run."""
        if thread_id is None:
            memory = self.session.memory if self.session is not None else None
            if memory is None:
                return []
            thread_id = memory.key
        thread = self._threads.get(thread_id)
        if thread is None:
            return []
        items = [dict(TOMBSTONE)] if thread.deleted else []
        items += [self._item(thread, list(entries.values())[-1]) for ns, entries in thread.pending.items() if entries and NS_END not in ns]
        return items

    def flush(self) -> None:
        """Commit this run's final checkpoints (called once the graph finished): the session's
        thread's go to ``session.new_items`` (``run_agent`` commits them once the run succeeded),
        every other thread's are committed to its own memory key now, under the run's scope."""
        session = self.session
        if session is None or session.memory is None:
            return
        for thread_id, thread in list(self._threads.items()):
            items = self.new_items(thread_id)
            if not items:
                continue
            if thread_id == session.memory.key:
                session.new_items.extend(items)
            else:
                memory = self._memory(thread_id)
                assert memory is not None
                memory.commit(items, writer=self._scope() or f"tether-langgraph-{uuid.uuid4().hex}")
            for item in items:
                self._fold(thread, item)
            thread.pending.clear()
            thread.deleted = False

    # -- lookups ---------------------------------------------------------------------------------
    @staticmethod
    def _find(thread: _Thread, ns: str, checkpoint_id: str | None) -> _Entry | None:
        pending = thread.pending.get(ns, {})
        committed = thread.committed.get(ns, [])
        if checkpoint_id is None:
            if pending:
                return list(pending.values())[-1]
            return committed[-1] if committed else None
        if checkpoint_id in pending:
            return pending[checkpoint_id]
        return next((e for e in reversed(committed) if e.id == checkpoint_id), None)

    def _tuple(self, thread_id: str, entry: _Entry) -> CheckpointTuple:
        def conf(checkpoint_id: str) -> RunnableConfig:
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": entry.ns, "checkpoint_id": checkpoint_id}}

        if entry.typed is not None:
            checkpoint = self.serde.loads_typed(entry.typed)
        else:
            assert entry.head is not None
            checkpoint = {
                **self.serde.loads_typed(entry.head),
                "channel_values": {k: list(v) if isinstance(v, list) else v for k, v in (entry.values or {}).items()},
            }
        writes = sorted(entry.writes, key=lambda w: (w[3], w[0], w[4]))
        return CheckpointTuple(
            config=conf(entry.id),
            checkpoint=checkpoint,
            metadata=self.serde.loads_typed(entry.metadata),
            parent_config=conf(entry.parent) if entry.parent else None,
            pending_writes=[(t, c, self.serde.loads_typed(v)) for t, c, v, _, _ in writes],
        )

    @staticmethod
    def _entries(thread: _Thread, ns: str | None) -> list[_Entry]:
        """A thread's entries (of one namespace, or all), newest first: commit order, then this run's."""
        spaces = [ns] if ns is not None else list(dict.fromkeys([*thread.committed, *thread.pending]))
        out: list[_Entry] = []
        for space in spaces:
            entries = [*thread.committed.get(space, []), *thread.pending.get(space, {}).values()]
            out.extend(reversed(entries))
        return out

    # -- BaseCheckpointSaver ---------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        entry = self._find(self._thread(thread_id), conf.get("checkpoint_ns", ""), get_checkpoint_id(config))
        return self._tuple(thread_id, entry) if entry is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """The thread's checkpoints, newest first (``config=None``: every thread this instance
        has opened); ``filter`` matches metadata keys, ``before`` is a checkpoint id cursor."""
        conf = (config or {}).get("configurable", {})
        if "thread_id" in conf:
            threads = [str(conf["thread_id"])]
            self._thread(threads[0])
        else:
            threads = list(self._threads)
        wanted = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        for thread_id in threads:
            for entry in self._entries(self._threads[thread_id], conf.get("checkpoint_ns")):
                if wanted is not None and entry.id != wanted:
                    continue
                if before_id is not None and entry.id >= before_id:
                    continue
                found = self._tuple(thread_id, entry)
                if filter and not all(found.metadata.get(k) == v for k, v in filter.items()):
                    continue
                if limit is not None:
                    if limit <= 0:
                        return
                    limit -= 1
                yield found

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), conf.get("checkpoint_ns", "")
        if NS_END not in ns and self._memory(thread_id) is not None:
            _refuse_delta_channels(thread_id, ns, checkpoint, metadata)
        entry = _Entry(
            ns=ns,
            id=checkpoint["id"],
            parent=conf.get("checkpoint_id"),
            metadata=self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            typed=self.serde.dumps_typed(checkpoint),  # now: the loop may reuse what it handed us
        )
        self._thread(thread_id).pending.setdefault(ns, {})[entry.id] = entry
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": entry.id}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        entry = self._find(self._thread(str(conf["thread_id"])), conf.get("checkpoint_ns", ""), conf.get("checkpoint_id"))
        if entry is None:
            return
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            if idx >= 0 and any(w[0] == task_id and w[4] == idx for w in entry.writes):
                continue  # a regular write is stored once, as InMemorySaver does
            entry.writes = [w for w in entry.writes if not (w[0] == task_id and w[4] == idx)]
            entry.writes.append((task_id, channel, self.serde.dumps_typed(value), task_path, idx))

    def delete_thread(self, thread_id: str) -> None:
        """Forget the thread (every namespace, its writes): it reads as empty from now on. A
        thread with committed checkpoints gets a tombstone in the next commit (memory is
        append-only: the earlier segments stay in the store, hidden)."""
        thread = self._thread(str(thread_id))
        thread.deleted = thread.deleted or any(thread.committed.values())
        thread.committed.clear()
        thread.pending.clear()

    # The async API: a thread's first use reads the store in a worker thread, the rest is in memory.
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        await self._athread(str(config["configurable"]["thread_id"]))
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        conf = (config or {}).get("configurable", {})
        if "thread_id" in conf:
            await self._athread(str(conf["thread_id"]))
        for found in self.list(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        await self._athread(str(config["configurable"]["thread_id"]))
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await self._athread(str(config["configurable"]["thread_id"]))
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._athread(str(thread_id))
        self.delete_thread(thread_id)

    async def aflush(self) -> None:
        """:meth:`flush` with its store writes off the event loop."""
        await asyncio.to_thread(self.flush)

    def __repr__(self) -> str:
        committed = sum(len(v) for t in self._threads.values() for v in t.committed.values())
        pending = sum(len(v) for t in self._threads.values() for v in t.pending.values())
        return f"TetherCheckpointer({len(self._threads)} threads, {committed} committed, {pending} pending)"


def _base_values(entries: Sequence[_Entry], item: dict[str, Any]) -> dict[str, Any]:
    """The channel values the committing run started from (``{}``: an empty thread)."""
    base_id = item.get("base")
    if base_id is None:
        return {}
    found = next((e for e in reversed(entries) if e.id == base_id), None)
    return (found.values or {}) if found is not None else {}


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False
