"""A LangGraph checkpointer over a Tether memory key.

LangGraph keeps a conversation in a *thread* of checkpoints. :class:`TetherCheckpointer` is a
``BaseCheckpointSaver`` whose thread (``thread_id`` = the memory key) is rebuilt from the items
committed by earlier runs (``AgentSession.history``) and whose checkpoints of this run stay in
memory until the run succeeds. Then, for each namespace that outlives a run (the root graph,
``checkpointer=True`` subgraphs), the run's last checkpoint goes to ``AgentSession.new_items`` —
as a *delta* against the checkpoint the run started from — and ``run_agent`` commits it as one
segment:

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

Not supported: the beta ``DeltaChannel`` (its values live in the ancestor chain's writes, which
are not kept), and time travel to checkpoints inside an earlier run (only each run's last
checkpoint is kept).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.load import dumpd
from langchain_core.runnables import RunnableConfig
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

from tether.agent import AgentSession

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


class TetherCheckpointer(BaseCheckpointSaver[int]):
    """A checkpointer whose thread lives in Tether memory (one thread: the memory key).

    Give it the run's :class:`~tether.agent.AgentSession`: it starts from ``session.history``
    and :meth:`flush` (called by the adapter once the graph finished) appends this run's final
    checkpoints, as deltas, to ``session.new_items``. Without a session it is an empty thread
    kept for one attempt — what a graph that needs a checkpointer gets when no ``memory_key``
    is given.
    """

    def __init__(self, session: AgentSession | None = None, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.session = session
        # Mutated in place, never rebound: LangGraph hands the graph a shallow copy of the saver
        # (``with_allowlist``) and both must see the same entries.
        self._committed: dict[str, list[_Entry]] = {}
        self._pending: dict[str, dict[str, _Entry]] = {}
        for item in session.history if session is not None else ():
            self._fold(item)

    # -- memory items ------------------------------------------------------------------------------
    def _fold(self, item: dict[str, Any]) -> _Entry:
        """Apply one committed item on top of its namespace's latest checkpoint."""
        ns = item["ns"]
        entries = self._committed.setdefault(ns, [])
        values = dict(entries[-1].values or {}) if entries else {}
        for name in item.get("removed", []):
            values.pop(name, None)
        base = self._base_values(ns, item)
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
        entry = _Entry(
            ns=ns,
            id=item["id"],
            parent=item.get("parent"),
            metadata=_unb64(item["metadata"]),
            writes=[(t, c, _unb64([vt, vb]), p, i) for t, c, vt, vb, p, i in item.get("writes", [])],
            head=_unb64(item["checkpoint"]),
            values=values,
        )
        entries.append(entry)
        return entry

    def _base_values(self, ns: str, item: dict[str, Any]) -> dict[str, Any]:
        """The channel values the committing run started from (``{}``: an empty thread)."""
        base_id = item.get("base")
        if base_id is None:
            return {}
        found = next((e for e in reversed(self._committed.get(ns, [])) if e.id == base_id), None)
        return (found.values or {}) if found is not None else {}

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

    def _item(self, entry: _Entry) -> dict[str, Any]:
        """This run's checkpoint as a delta against the thread's committed state."""
        assert entry.typed is not None
        checkpoint = dict(self.serde.loads_typed(entry.typed))
        values: dict[str, Any] = checkpoint.pop("channel_values", {}) or {}
        base_entries = self._committed.get(entry.ns) or []
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

    def new_items(self) -> list[dict[str, Any]]:
        """This run's last checkpoint in each namespace that outlives a run, as memory items."""
        return [self._item(list(entries.values())[-1]) for ns, entries in self._pending.items() if entries and NS_END not in ns]

    def flush(self) -> None:
        """Move this run's final checkpoints into ``session.new_items`` (committed on success)."""
        if self.session is None:
            return
        items = self.new_items()
        self.session.new_items.extend(items)
        for item in items:
            self._fold(item)
        self._pending.clear()

    # -- lookups ---------------------------------------------------------------------------------
    def _find(self, ns: str, checkpoint_id: str | None) -> _Entry | None:
        pending = self._pending.get(ns, {})
        committed = self._committed.get(ns, [])
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

    def _entries(self, ns: str | None) -> list[_Entry]:
        """Every entry (of one namespace, or all), newest first."""
        spaces = [ns] if ns is not None else list(dict.fromkeys([*self._committed, *self._pending]))
        out: list[_Entry] = []
        for space in spaces:
            entries = [*self._committed.get(space, []), *self._pending.get(space, {}).values()]
            out.extend(reversed(entries))
        return out

    # -- BaseCheckpointSaver ---------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        entry = self._find(conf.get("checkpoint_ns", ""), get_checkpoint_id(config))
        return self._tuple(conf["thread_id"], entry) if entry is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable", {})
        thread_id = conf.get("thread_id", "")
        wanted = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        for entry in self._entries(conf.get("checkpoint_ns")):
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
        ns = conf.get("checkpoint_ns", "")
        entry = _Entry(
            ns=ns,
            id=checkpoint["id"],
            parent=conf.get("checkpoint_id"),
            metadata=self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)),
            typed=self.serde.dumps_typed(checkpoint),  # now: the loop may reuse what it handed us
        )
        self._pending.setdefault(ns, {})[entry.id] = entry
        return {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": ns, "checkpoint_id": entry.id}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        entry = self._find(conf.get("checkpoint_ns", ""), conf.get("checkpoint_id"))
        if entry is None:
            return
        for i, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            if idx >= 0 and any(w[0] == task_id and w[4] == idx for w in entry.writes):
                continue  # a regular write is stored once, as InMemorySaver does
            entry.writes = [w for w in entry.writes if not (w[0] == task_id and w[4] == idx)]
            entry.writes.append((task_id, channel, self.serde.dumps_typed(value), task_path, idx))

    def delete_thread(self, thread_id: str) -> None:
        raise NotImplementedError("Tether memory is append-only: use a new memory_key to start over")

    # In memory and cheap: the async API calls the sync one.
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in self.list(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    def __repr__(self) -> str:
        committed = sum(len(v) for v in self._committed.values())
        pending = sum(len(v) for v in self._pending.values())
        return f"TetherCheckpointer({committed} committed, {pending} pending)"


_MISSING = object()


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False
