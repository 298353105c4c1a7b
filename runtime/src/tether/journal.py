"""The journal: an append-only record of the completed steps of one run scope (README.md, "How it works": Occurrences).

A step's key is ``(kind, fingerprint, occurrence)``. An attempt loads the whole journal once and
serves replays from memory; a live step is written before it counts as done. Records are immutable
once written: a second writer of the same key loses quietly (``create`` is exclusive), except over a
record that failed its checksum.

A record is written as a loose object at its step key (``<kind>/<fp>-<occ>.rec``) unless the
attempt keeps a single copy (below), and two objects at fixed keys hold copies, so a load reads
known keys and never lists:

- the *pack*, every record: rewritten in the background every ``PACK_EVERY`` new records and at
  the end of the attempt (never on a step's path), conditionally on the version of the pack this
  attempt last read or wrote (``Store.write_if``, the write that also fences an older attempt); a
  pack changed since is read and the records it holds that this attempt does not know are kept:
  a pack never loses a record once it held one. Once a pack is durable, the loose records of its
  steps are removed (each step is stored once; ``close`` removes those earlier attempts left). A
  kill between the two leaves both copies, which count once;
- the *tail*, the records the pack lacks: written with every step, before its loose record. A
  step counts as written once both are durable, and a loose record exists only once a tail holds
  it, so pack + tail hold every step written, whenever the writer was killed; a load writes the
  loose records of steps it found in the tail only. Tail writes are one at a time (a group commit:
  parallel steps share a write). Where the store appends (``LocalStore``) a step is added at the
  end of the tail (``Store.append_if``: no temp file, rename and folder sync a step), and the tail
  is rewritten holding only what the pack lacks once it holds ``TAIL_APPENDS`` entries; elsewhere
  (S3) every tail write carries every record the pack lacks. The tail names the pack it
  continues (``base``); packs carry their own id and the id of the pack their attempt loaded. The
  closing tail follows the closing pack: empty once the pack is durable, else holding what the
  last durable pack lacks.

With ``single_copy`` (``run_agent``'s runs) a step counts as written once its tail is durable and
no loose record is written at all: the tail holds the step until a durable pack does, and packs
never lose a record. A loose record per step, written and then removed once packed, cost two store
requests a step and, in a LangGraph turn, 20.3 vs 16.7 ms of CPU (benchmarks/peer_turns.py's run,
A/B in one process, load average 14 on 2 cores).

A load is one round trip for the pack and tail (read in parallel) plus the claim of the next
attempt number, sent as soon as the small tail arrives (it names the latest attempt that wrote),
overlapping the pack's transfer and decoding. Anything unexpected — a torn or corrupt pack or tail,
a tail that continues a pack other than the one read, a claim that fails (an attempt started since
that never wrote a tail, or a rival process) — falls back to listing the journal, reading the pack
and tail again (a newer pack may hold what the first one read lacks) and the loose records they
lack. Copies are only copies: a record in several counts once. A packed record is its step's only
copy: if it fails its checksum the step is a miss and runs again.

A model turn's request repeats the whole conversation so far; stored whole, a journal grows with
the square of its turns. So a model record's request is stored as a delta on the request of one of
the latest model records (``Delta``: each list that continues the base's list at the same path —
the messages, the tools — keeps only its new items), and a load rebuilds it from its base (which
is in the same journal); bytes per turn do not depend on the turn's position. Replay never reads
the stored request: a turn is found by the fingerprint of the request as sent. Records written
before deltas are whole and read as they are.

Two attempts never write one journal (the fence): the tail is written only by a conditional write
on the version its attempt last wrote or read, and a load takes the tail over (writes it as the new
attempt's, conditionally on the version it read; a changed tail is read again and merged first).
From then on the older attempt's writes are refused (:class:`~tether.errors.Superseded`: its step
counts as not done), a live tool call it would start is refused (``announce``: the next attempt's
number is claimed), and it says so on stderr; a call it was running then is still recorded (loose)
and the newer attempt waits for it (``older_call``; ``tether.fence``). Packs are written
conditionally too: a pack the newer attempt wrote is never overwritten by the older one, and one
the older attempt wrote after the newer one loaded is merged into the newer one's next pack.

On-disk record: ``<header JSON>\\n<body bytes><sha256 hex of everything before>``. A truncated or
corrupt record fails the checksum and counts as a miss.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from . import fence
from .canonical import sha256_hex
from .contract import journal_prefix
from .errors import StoreError, Superseded
from .stores import Store
from .stores.outage import patiently

Kind = Literal["model", "tool"]
Outcome = Literal["ok", "error"]
StepKey = tuple[str, str, int]

_SUM_LEN = 64
#: Records not yet in the pack that make the journal write a fresh pack (in the background).
PACK_EVERY = 8
PACK_MAGIC = b"tether-pack 2 "
TAIL_MAGIC = b"tether-tail 1 "
#: A tail steps are added to at its end (a store that ``appends``): its header counts no records
#: and sums no body; each entry is framed and carries its own checksum, so a torn last append
#: reads as a tail that is not whole.
GROWING_TAIL_MAGIC = b"tether-tail 2 "
#: Entries a growing tail holds before it is rewritten whole (holding only what the pack lacks).
TAIL_APPENDS = 2 * PACK_EVERY


@dataclass
class Record:
    """One completed step.

    ``request`` is the canonical request (secrets removed). For a model turn ``response`` holds the
    HTTP status, the kept headers and whether it was streamed, and ``body`` the raw response bytes
    (the whole event stream when streamed). For a tool, ``body`` is the JSON result or error.
    """

    kind: str
    fingerprint: str
    occurrence: int
    outcome: str
    request: dict[str, Any]
    response: dict[str, Any] = field(default_factory=dict)
    body: bytes = b""
    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""
    attempt: int = 0
    started_at: float = 0.0
    duration_ms: float = 0.0
    #: Only on a record read from a delta and not resolved yet (``_resolve``): the key of the
    #: record its request continues and the lists it keeps from it (see ``Delta``).
    delta: dict[str, Any] | None = None

    @property
    def key(self) -> StepKey:
        return (self.kind, self.fingerprint, self.occurrence)

    def encode(self, delta: Delta | None = None) -> bytes:
        """The on-disk record; with ``delta`` (``_delta``), its request stored as that delta."""
        # Shallow: ``asdict`` deep-copies the request (every message of the conversation) first.
        header = {f.name: getattr(self, f.name) for f in _HEADER_FIELDS}
        if delta is not None:
            header["request"], header["delta"] = delta.request, {"base": list(delta.base), "keep": delta.keep}
        head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        payload = head + self.body
        return payload + sha256_hex(payload).encode()

    @classmethod
    def decode(cls, data: bytes) -> Record | None:
        """The record, or ``None`` if it is truncated or corrupt."""
        payload, checksum = data[:-_SUM_LEN], data[-_SUM_LEN:]
        if len(data) <= _SUM_LEN or sha256_hex(payload).encode() != checksum:
            return None
        head, _, body = payload.partition(b"\n")
        try:
            return cls(**json.loads(head), body=body)
        except (ValueError, TypeError):
            return None


#: ``delta`` is written only when there is one: a whole record reads as it did before deltas.
_HEADER_FIELDS = tuple(f for f in fields(Record) if f.name not in ("body", "delta"))

#: How many of the latest model records a new one is compared with to find its base (parallel
#: conversations, e.g. sub-agents, interleave: each continues its own).
DELTA_CANDIDATES = 4


@dataclass
class Delta:
    """A request stored as a delta on the request of record ``base``: every list that continues
    the base request's list at the same path is cut to its new items; ``keep`` names them and
    how many items come from the base (``[[key, key...], n]``). ``kept``: items kept in all."""

    base: StepKey
    request: dict[str, Any]
    keep: list[list[Any]]
    kept: int


def _delta(request: dict[str, Any], base: Record) -> Delta | None:
    """``request`` as a delta on ``base``'s request, or ``None`` if it continues no list of it.
    A conversation's next request repeats every message so far: stored whole, a journal grows
    with the square of the turns; as deltas, with the turns. Items compare as Python values
    (one pass in C; ``1 == 1.0``): a history re-sent with a number changed only in type would
    show its earlier form to a viewer. Replay never reads the stored request: it is keyed by
    the fingerprint of the request as sent."""
    keep: list[list[Any]] = []
    kept = 0

    def cut(new: dict[str, Any], old: dict[str, Any], path: list[str]) -> dict[str, Any]:
        nonlocal kept
        out: dict[str, Any] = {}
        for k, v in new.items():
            o = old.get(k)
            if isinstance(v, list) and isinstance(o, list) and 0 < len(o) <= len(v) and v[: len(o)] == o:
                keep.append([[*path, k], len(o)])
                kept += len(o)
                out[k] = v[len(o) :]
            elif isinstance(v, dict) and isinstance(o, dict):
                out[k] = cut(v, o, [*path, k])
            else:
                out[k] = v
        return out

    trimmed = cut(request, base.request, [])
    return Delta(base.key, trimmed, keep, kept) if keep else None


def _items(request: dict[str, Any]) -> int:
    """The most items a delta on ``request`` can keep: those of its lists (in it and its dicts)."""
    return sum(len(v) if isinstance(v, list) else _items(v) if isinstance(v, dict) else 0 for v in request.values())


def _resolve(record: Record, base: Record) -> bool:
    """Rebuild a delta record's whole request from its base's (resolved) one; ``False`` if the
    delta does not fit the base."""
    request = dict(record.request)
    for entry in (record.delta or {}).get("keep") or []:
        path, n = entry if isinstance(entry, list) and len(entry) == 2 else ([], None)
        if not (isinstance(path, list) and path and isinstance(n, int)):
            return False
        old: Any = base.request
        for k in path:
            old = old.get(k) if isinstance(old, dict) else None
        parent: Any = request
        for k in path[:-1]:
            if not isinstance(parent.get(k), dict):
                return False
            parent[k] = dict(parent[k])  # copied on the way down: a shared dict stays as it was
            parent = parent[k]
        new = parent.get(path[-1])
        if not (isinstance(old, list) and len(old) >= n and isinstance(new, list)):
            return False
        parent[path[-1]] = old[:n] + new  # the items are the base's own objects: no copy
    record.request, record.delta = request, None
    return True


def _delta_base(record: Record) -> StepKey:
    base = (record.delta or {}).get("base")
    return (str(base[0]), str(base[1]), int(base[2])) if isinstance(base, list) and len(base) == 3 else ("", "", 0)


def _resolve_all(records: Mapping[StepKey, Record], waiting: Iterable[Record]) -> tuple[list[Record], list[Record]]:
    """The delta records of ``waiting`` whose bases are in ``records`` or among them, resolved
    (in any order: a base may be read after the records continuing it), bases first; and those
    left (no base found, or a delta that does not fit its base)."""
    by_base: dict[StepKey, list[Record]] = {}
    for record in waiting:
        by_base.setdefault(_delta_base(record), []).append(record)
    resolved: dict[StepKey, Record] = {}
    ready = [records[key] for key in by_base if key in records]
    left: list[Record] = []
    while ready:
        base = ready.pop()
        for record in by_base.pop(base.key, []):
            if record.key in records or record.key in resolved:
                continue
            if _resolve(record, base):
                resolved[record.key] = record
                ready.append(record)
            else:
                left.append(record)
    return list(resolved.values()), left + [r for rs in by_base.values() for r in rs]


@dataclass(kw_only=True)
class StepCounts:
    """An attempt's steps, live and replayed, and where it left the recorded path: what the
    journal counts (:class:`Counters`) and a run's result reports (``tether.agent.AgentResult``)."""

    model_live: int = 0
    model_replayed: int = 0
    tool_live: int = 0
    tool_replayed: int = 0
    #: The first step of this attempt that missed while recorded steps of its kind were still
    #: unused: where a retry stopped following the recorded path.
    first_divergence: dict[str, Any] | None = None


@dataclass
class Counters(StepCounts):
    corrupt: int = 0
    #: When this attempt replayed its first step (epoch seconds): how long a retry took to
    #: resume (the operator's tether_kill_to_first_replay_seconds).
    first_replay_at: float | None = None

    def count(self, kind: str, replayed: bool) -> None:
        attr = f"{kind}_{'replayed' if replayed else 'live'}"
        setattr(self, attr, getattr(self, attr) + 1)
        if replayed and self.first_replay_at is None:
            self.first_replay_at = time.time()


#: A pack's or tail's id: ``[attempt, n]``, the n-th pack that attempt wrote.
PackId = list[int]


def _frames(entries: list[bytes]) -> bytes:
    return b"".join(len(d).to_bytes(8, "big") + d for d in entries)


def _blob(magic: bytes, header: dict[str, Any], entries: list[bytes]) -> bytes:
    body = _frames(entries)
    if magic != GROWING_TAIL_MAGIC:
        header = {**header, "records": len(entries), "sha256": sha256_hex(body)}
    return magic + json.dumps(header, sort_keys=True).encode() + b"\n" + body


def _split_blob(data: bytes | None, magic: bytes) -> tuple[dict[str, Any] | None, list[bytes], bool]:
    """A pack's or tail's header (``None`` if absent or unreadable), its entries, and whether it is
    whole (its checksum and count match, or for a growing tail its entries end where it ends: not
    torn, not corrupt)."""
    if magic == TAIL_MAGIC and data is not None and data.startswith(GROWING_TAIL_MAGIC):
        magic = GROWING_TAIL_MAGIC
    if not data or not data.startswith(magic):
        return None, [], False
    head, _, body = data.partition(b"\n")
    try:
        header = json.loads(head[len(magic) :])
    except ValueError:
        header = None  # its entries are still read: each record carries its own checksum
    if not isinstance(header, dict):
        header = None
    entries, i = [], 0
    while i + 8 <= len(body):
        size = int.from_bytes(body[i : i + 8], "big")
        entries.append(body[i + 8 : i + 8 + size])
        i += 8 + size
    if magic == GROWING_TAIL_MAGIC:
        # Entries are not summed together: each is checked on its own (``Journal.load``). A last
        # one cut short (its writer killed in the middle of an append, or the disk) is not whole:
        # the load lists, as for any copy it cannot trust.
        return header, entries, header is not None and i == len(body)
    whole = header is not None and i == len(body) and header.get("sha256") == sha256_hex(body) and header.get("records") == len(entries)
    return header, entries, whole


def _continues(tail: dict[str, Any], pack: dict[str, Any] | None) -> bool:
    """Whether ``pack`` holds every record of the pack ``tail`` continues (so pack + tail hold
    everything): the tail continues no pack; or this pack; or the pack this pack's attempt
    loaded; or an earlier pack of the same attempt (an attempt's packs only grow)."""
    base = tail.get("base")
    if base is None:
        return True
    if pack is None:
        return False
    own = pack.get("id")
    if base == own or base == pack.get("from"):
        return True
    if not (isinstance(base, list) and isinstance(own, list) and len(base) == len(own) == 2):
        return False
    return bool(base[0] == own[0] and base[1] <= own[1])


def read_records(store: Store, scope: str) -> list[Record]:
    """Every record of a run's journal, read only (no attempt is claimed, nothing is written): the
    pack, the tail and the loose records, each step once, in the order the steps were taken
    (attempt, then start time). For viewers (``tether ui``); a corrupt copy is skipped."""
    prefix = journal_prefix(scope)
    keys = store.list(prefix)
    found: dict[StepKey, Record] = {}
    blobs = store.get_many([k for k in (f"{prefix}pack", f"{prefix}tail") if k in keys])
    copies = [e for key, magic in (("pack", PACK_MAGIC), ("tail", TAIL_MAGIC)) for e in _split_blob(blobs.get(prefix + key), magic)[1]]
    for data in copies:
        if (record := Record.decode(data)) is not None:
            found.setdefault(record.key, record)
    # Loose records only for the steps the copies lack (a run of hundreds of steps: no GET each).
    journal = Journal(store, scope)
    loose = [k for k in keys if k.endswith(".rec") and journal._key_of(k) not in found]
    for data in store.get_many(loose).values():
        if (record := Record.decode(data)) is not None:
            found.setdefault(record.key, record)
    whole = {key: r for key, r in found.items() if r.delta is None}
    resolved, _ = _resolve_all(whole, (r for r in found.values() if r.delta is not None))
    whole.update((r.key, r) for r in resolved)
    return sorted(whole.values(), key=lambda r: (r.attempt, r.started_at))


def read_attempts(store: Store, scope: str) -> dict[int, float]:
    """The attempts that claimed a number in a run's journal, with the time each started."""
    prefix = f"{journal_prefix(scope)}attempts/"
    started: dict[int, float] = {}
    for key, data in store.get_many(store.list(prefix)).items():
        try:
            started[int(key[len(prefix) :])] = float(data.decode())
        except ValueError:
            continue
    return started


class Journal:
    """The journal of one run scope, loaded for one attempt."""

    def __init__(self, store: Store, scope: str) -> None:
        self.store = store
        self.scope = scope
        self.prefix = journal_prefix(scope)
        self.records: dict[StepKey, Record] = {}
        self.counters = Counters()
        self.attempt = 0
        #: Recorded occurrences per ``(kind, fingerprint)``; those this attempt replayed or wrote;
        #: those being written now. Guarded by ``_lock``: seams on several loops and threads share it.
        self._recorded: dict[tuple[str, str], set[int]] = {}
        self._used: dict[tuple[str, str], set[int]] = {}
        self._writing: dict[tuple[str, str], set[int]] = {}
        self._lock = threading.Lock()
        self._unused: dict[str, int] = {"model": 0, "tool": 0}
        self._corrupt_keys: set[StepKey] = set()
        #: Every record's encoded bytes in the order they became known (what packs and tails are
        #: made of); the first ``_pack_count`` are in the pack ``_pack_id`` the tail continues.
        self._entries: list[bytes] = []
        self._pack_id: PackId | None = None
        self._pack_count = 0
        self._loaded_pack: PackId | None = None
        self._packs_written = 0
        self._packer: threading.Thread | None = None
        self._pack_again = False
        #: Records being written now (in the tail already, not yet counted), by write number; the
        #: newest write number, and the newest whose records a durable tail holds.
        self._in_flight: dict[int, bytes] = {}
        self._tail_version = 0
        self._tail_durable = 0
        self._tail_busy = False
        self._tail_changed = threading.Condition(self._lock)
        self._repairer: threading.Thread | None = None
        #: Count a step once its tail is durable and write no loose record: the tail holds it
        #: until a durable pack does (see the module docstring).
        self.single_copy = False
        #: The versions of the tail and the pack this attempt last read or wrote: its writes of
        #: them are conditional on these (the fence); why it may no longer write, once it knows.
        self._tail_token: str | None = None
        #: The entries of the growing tail this attempt last wrote, whose end new steps are added
        #: to (``Store.appends``), or -1 (a whole tail, or none written yet); the entries indexed
        #: since that it may lack (an older attempt's call adopted), added with the next step.
        self._tail_entries = -1
        self._tail_lacks: list[bytes] = []
        self._pack_token: str | None = None
        self.superseded_by: str | None = None
        #: Live tool calls this attempt announced (``tether.fence``): recorded even once superseded.
        self._announced: set[StepKey] = set()
        self._announcer: fence.Announcer | None = None
        #: Delta records read before their base (resolved once it is read), with their bytes.
        self._waiting: dict[StepKey, tuple[Record, bytes]] = {}
        #: The latest model records: the bases a new model record's request is a delta on.
        self._recent_models: deque[StepKey] = deque(maxlen=DELTA_CANDIDATES)
        #: Records of other writers found in the pack when rewriting it (kept in every pack this
        #: attempt writes: a pack never loses a record once it held one).
        self._foreign: dict[StepKey, bytes] = {}
        #: Steps a durable pack holds (their loose records go); steps with a loose record in the
        #: store; steps whose loose record is being written.
        self._packed_keys: set[StepKey] = set()
        self._loose_made: set[StepKey] = set()
        self._loose_pending: set[StepKey] = set()

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> Journal:
        """Read every record once and claim the next attempt number (see the module docstring):
        the pack and the tail in parallel, the claim as soon as the tail names the latest attempt;
        a listing only when something is not as the writers leave it."""
        with ThreadPoolExecutor(2, thread_name_prefix="tether-journal-load") as pool:
            pack_read = pool.submit(self.store.get_versioned, self.pack_key)
            tail_found = self.store.get_versioned(self.tail_key)
            tail_data = tail_found[0] if tail_found is not None else None
            tail, tail_entries, tail_whole = _split_blob(tail_data, TAIL_MAGIC)
            named = tail.get("attempt") if tail is not None else 0
            latest = named if isinstance(named, int) else None
            # The claim's round trip overlaps the pack's transfer and decoding.
            claim = pool.submit(self.store.create, self._attempt_key(latest + 1), self._stamp()) if latest is not None else None
            pack_found = pack_read.result()
            self._pack_token = pack_found[1] if pack_found is not None else None
            pack, pack_entries, pack_whole = _split_blob(pack_found[0] if pack_found is not None else None, PACK_MAGIC)
            for entry in pack_entries:
                self._add_entry(entry)
            self._settle()  # the pack's deltas indexed now: ``_pack_count`` counts them (else every tail repeats them)
            if pack is not None and pack_whole:
                self._pack_id = self._loaded_pack = pack.get("id")
                self._pack_count = len(self._entries)
            added = [(entry, self._add_entry(entry)) for entry in tail_entries]
            tail_only = [entry for entry, new in added if new]
            self._settle()
            if claim is not None and latest is not None and claim.result():
                self.attempt = latest + 1
        intact = all(new is not None for _, new in added)  # a growing tail's entries are checked one by one
        complete = tail_whole and intact and _continues(tail or {}, pack if pack_whole else None) and not self._waiting
        new_journal = tail_data is None and pack_found is None
        if not (self.attempt and (complete or new_journal)):
            self._load_listing()
        tail_only += self._take_over(tail_found[1] if tail_found is not None else None)
        for record, _ in self._waiting.values():  # its base is nowhere: a miss, like a corrupt record
            self.counters.corrupt += 1
            self._corrupt_keys.add(record.key)
        self._waiting.clear()
        if len(self._entries) - self._pack_count >= PACK_EVERY:
            self._pack_soon()
        if tail_only and not self.single_copy:  # single copy: the tail this attempt took over holds them
            self._repairer = threading.Thread(target=self._write_loose, args=(tail_only,), name="tether-journal-loose", daemon=True)
            self._repairer.start()
        return self

    def _take_over(self, version: str | None) -> list[bytes]:
        """Write the tail as this attempt's, conditionally on the ``version`` read: from then on
        an older attempt still running has its writes refused. A tail changed since (that attempt
        wrote a step, or a pack and a tail continuing it) is read again and its records merged
        first, so nothing it wrote is lost. The entries it added (their loose records may be
        missing)."""
        added: list[bytes] = []
        while True:
            with self._lock:
                entries = self._entries[self._pack_count :]
            if self._write_tail(self._tail_blob(self._pack_id, entries), version, len(entries)):
                return added
            found = self.store.get_versioned(self.tail_key)
            version = found[1] if found is not None else None
            tail, entries, _ = _split_blob(found[0] if found is not None else None, TAIL_MAGIC)
            if tail is not None and tail.get("base") not in (None, self._pack_id):  # packed since: read that pack too
                pack = self.store.get_versioned(self.pack_key)
                if pack is not None:
                    self._pack_token = pack[1]
                    entries = _split_blob(pack[0], PACK_MAGIC)[1] + entries
            added += [entry for entry in entries if self._add_entry(entry)]
            self._settle()

    def _tail_blob(self, base: PackId | None, entries: list[bytes]) -> bytes:
        """A tail holding ``entries`` and continuing pack ``base``: one to grow where the store appends."""
        magic = GROWING_TAIL_MAGIC if self.store.appends else TAIL_MAGIC
        return _blob(magic, {"attempt": self.attempt, "base": base}, entries)

    def _write_tail(self, blob: bytes, version: str | None, count: int) -> bool:
        """A conditional write of the tail (of ``count`` entries); ``False`` if it changed since
        ``version`` (unless what is there is this very blob: a write whose answer was lost and
        retried). Raises :class:`Superseded` once a newer attempt has claimed the run."""
        token = self.store.write_if(self.tail_key, blob, version)
        if token is None:
            found = self.store.get_versioned(self.tail_key)
            if found is not None and found[0] == blob:
                token = found[1]
            else:
                if why := self.superseded():
                    raise Superseded(why)
                return False
        self._tail_token = token
        self._tail_entries = count if blob.startswith(GROWING_TAIL_MAGIC) else -1
        return True

    def _append_tail(self, entries: list[bytes], version: str | None) -> bool:
        """``entries`` added at the end of the growing tail, conditionally on ``version`` like
        :meth:`_write_tail` (a store's append fails as a whole: nothing to retry or compare)."""
        token = self.store.append_if(self.tail_key, _frames(entries), version) if version is not None else None
        if token is None:
            if why := self.superseded():
                raise Superseded(why)
            return False
        self._tail_token = token
        self._tail_entries += len(entries)
        return True

    def superseded(self) -> str | None:
        """Why this attempt may no longer write its journal or start a tool call (a newer attempt
        has claimed the run: one store read), or ``None``. Said once on stderr."""
        if self.superseded_by is None and self.attempt and self.store.get(self._attempt_key(self.attempt + 1)) is not None:
            self.superseded_by = (
                f"attempt {self.attempt + 1} of run {self.scope} has started: attempt {self.attempt}'s journal writes "
                "and tool calls are refused (two attempts never write one journal)"
            )
            print(f"tether: {self.superseded_by}", file=sys.stderr, flush=True)
        return self.superseded_by

    def announce(self, key: StepKey) -> Callable[[], None]:
        """Announce a live tool call of step ``key`` before it runs (``tether.fence``); the function
        returned ends the announcement. Raises :class:`Superseded` (the call must not run) if a newer
        attempt has claimed the run: checked after the announcement, so one of the two sees the other."""
        with self._lock:
            if self._announcer is None:
                self._announcer = fence.Announcer(self.store, self.prefix, self.attempt)
        end = self._announcer.announce(key)
        try:
            why = patiently(self.superseded, "the start of a tool call")
        except BaseException:
            end()
            raise
        if why:
            end()
            raise Superseded(why)
        with self._lock:
            self._announced.add(key)
        return end

    def older_call(self, key: StepKey) -> Record | None:
        """The record of a live call of step ``key`` an older attempt was running when this one
        started, once it is written (waiting while that attempt runs it: ``tether.fence``), taken
        as replayed; ``None`` if no older attempt runs it (this attempt runs it)."""
        if self.attempt <= 1:
            return None  # nothing older
        data = patiently(
            lambda: fence.older_call(self.store, self.prefix, key, self.attempt, self._object_key(key)), "the start of a tool call"
        )
        record = Record.decode(data) if data is not None else None
        if record is None or record.key != key:
            return None
        with self._lock:
            if record.key not in self.records:
                self._index(record, data)  # type: ignore[arg-type]
            self._used.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
            self._writing.get((record.kind, record.fingerprint), set()).discard(record.occurrence)
            self.counters.count(record.kind, replayed=True)
            self._unused[record.kind] -= 1
        return record

    def _write_loose(self, entries: list[bytes]) -> None:
        """Write the loose records of steps found in the tail only (their writer was killed between
        the tail and the loose record), so every step ends up with its loose record. Exclusive
        creates: a record that exists is left as it is. In the background; failures change nothing
        (the copies hold the steps; the next attempt tries again)."""

        def create(data: bytes) -> None:
            record = Record.decode(data)
            if record is not None:
                self._write_one_loose(record.key, data, False)

        with ThreadPoolExecutor(min(8, len(entries)), thread_name_prefix="tether-journal-loose") as pool:
            list(pool.map(create, entries))

    def _write_one_loose(self, key: StepKey, data: bytes, overwrite: bool, *, quiet: bool = True) -> None:
        """A loose record: exclusive create (a record that exists stays), or an overwrite of a
        corrupt one; none once a durable pack holds the step (no second copy), and removed if
        a pack came to hold it meanwhile. ``quiet``: a failure changes nothing (the copies hold
        the step)."""
        with self._lock:
            if key in self._packed_keys:
                return
            self._loose_pending.add(key)
        made = False
        try:
            if overwrite:
                self.store.put(self._object_key(key), data)
            else:
                self.store.create(self._object_key(key), data)
            made = True  # or it existed already
        except StoreError:
            if not quiet:
                raise
        finally:
            with self._lock:
                self._loose_pending.discard(key)
                if made:
                    self._loose_made.add(key)
                packed = made and key in self._packed_keys
        if packed:
            self._delete_loose([key])

    def _delete_loose(self, keys: Iterable[StepKey]) -> None:
        """Remove loose records a durable pack holds (every later pack holds them too: packs are
        rewritten by compare-and-swap and only grow). Quiet: one left behind is a copy too, and
        the next ``close`` removes it."""
        names = [self._object_key(key) for key in keys]

        def delete(name: str) -> None:
            try:
                self.store.delete(name)
            except StoreError:
                pass

        if len(names) == 1:
            delete(names[0])
        elif names:
            with ThreadPoolExecutor(min(8, len(names)), thread_name_prefix="tether-journal-delete") as pool:
                list(pool.map(delete, names))
        with self._lock:
            self._loose_made.difference_update(keys)

    def _load_listing(self) -> None:
        """The slow path: list the journal, read the loose records the copies lacked beside the
        claim (unless the fast path claimed already)."""
        keys = self.store.list(self.prefix)
        # The pack and tail read again: a pack newer than the one read first holds records whose
        # loose copies are gone (a tail is written after the pack it continues: read after the
        # tail, the pack is that one or a newer one, and packs only grow).
        blobs = self.store.get_many([self.pack_key, self.tail_key])
        for key, magic in ((self.pack_key, PACK_MAGIC), (self.tail_key, TAIL_MAGIC)):
            for entry in _split_blob(blobs.get(key), magic)[1]:
                if self._add_entry(entry) is None and key == self.pack_key:
                    self.counters.corrupt += 1  # the only copy of a packed step: a miss, run again
        self._settle()
        attempts = [k for k in keys if k.startswith(self.prefix + "attempts/")]
        loose = [k for k in keys if k.endswith(".rec") and self._key_of(k) not in self.records]
        self._loose_made.update(self._key_of(k) for k in keys if k.endswith(".rec"))
        with ThreadPoolExecutor(1, thread_name_prefix="tether-journal-load") as pool:
            claim = pool.submit(self._claim_attempt, len(attempts) + 1) if not self.attempt else None
            for name, data in self.store.get_many(loose).items():
                self._add(name, data)
            self._settle()
            self.attempt = claim.result() if claim is not None else self.attempt

    @property
    def pack_key(self) -> str:
        return f"{self.prefix}pack"

    @property
    def tail_key(self) -> str:
        return f"{self.prefix}tail"

    def _attempt_key(self, attempt: int) -> str:
        return f"{self.prefix}attempts/{attempt:05d}"

    @staticmethod
    def _stamp() -> bytes:
        return str(time.time()).encode()

    def _claim_attempt(self, attempt: int) -> int:
        while not self.store.create(self._attempt_key(attempt), self._stamp()):
            attempt += 1  # another process claimed it first
        return attempt

    def _add(self, name: str, data: bytes) -> bool:
        record = Record.decode(data)
        if record is None:
            self.counters.corrupt += 1
            self._corrupt_keys.add(self._key_of(name))
            return False
        if record.key not in self.records and record.key not in self._waiting:
            self._take(record, data)
        return True

    def _add_entry(self, data: bytes) -> bool | None:
        """A copy from a pack or tail; whether it was new, ``None`` if it is corrupt (skipped:
        the listing reads the loose record, if the step still has one)."""
        record = Record.decode(data)
        if record is None:
            return None
        if record.key in self.records or record.key in self._waiting:
            return False
        self._take(record, data)
        return True

    def _take(self, record: Record, data: bytes) -> None:
        """A record read: indexed, or (a delta) kept until :meth:`_settle` finds its base."""
        if record.delta is not None:
            self._waiting[record.key] = (record, data)
        else:
            self._index(record, data)

    def _settle(self) -> None:
        """Index the delta records whose bases are known now (bases first)."""
        if self._waiting:
            resolved, _ = _resolve_all(self.records, (record for record, _ in self._waiting.values()))
            for record in resolved:
                self._index(record, self._waiting.pop(record.key)[1])

    def _index(self, record: Record, data: bytes) -> None:
        self.records[record.key] = record
        self._entries.append(data)
        if self._tail_entries >= 0:
            self._tail_lacks.append(data)
        self._recorded.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
        self._unused[record.kind] = self._unused.get(record.kind, 0) + 1
        if record.kind == "model":
            self._recent_models.append(record.key)

    def _encode(self, record: Record) -> bytes:
        """A model record's request as a delta on the latest model record it continues most of
        (``_delta``); anything else whole."""
        if record.kind != "model":
            return record.encode()
        with self._lock:
            bases = [self.records[key] for key in self._recent_models if key in self.records]
        best: Delta | None = None
        # The latest first: in one conversation it keeps the most, and an older base that cannot
        # keep as many is not compared at all (on a tie the oldest wins, as it always did).
        for base in reversed(bases):
            if best is not None and _items(base.request) < best.kept:
                continue
            delta = _delta(record.request, base)
            if delta is not None and (best is None or delta.kept >= best.kept):
                best = delta
        return record.encode(best)

    # -- the copies: pack and tail -----------------------------------------------------------
    def _next_pack_id(self) -> PackId:
        with self._lock:
            self._packs_written += 1
            return [self.attempt, self._packs_written]

    def _pack_blob(self, pack_id: PackId, entries: list[bytes], closed: bool) -> bytes:
        header = {"id": pack_id, "from": self._loaded_pack, "attempt": self.attempt, "closed_by": self.attempt if closed else None}
        return _blob(PACK_MAGIC, header, entries)

    def _write_pack(self, pack_id: PackId, closed: bool, extra: list[bytes] | None = None) -> tuple[int, set[StepKey]] | None:
        """Write a pack of every record known (and ``extra``), conditionally on the version of the
        pack this attempt last read or wrote (the fence: a newer attempt's pack is never
        overwritten, ``None`` then). A pack changed since (an older attempt's, a rival's) is read
        and the records it holds that this attempt does not know are kept in this one
        (``_foreign``): a pack never loses a record once it held one, so a loose record can go
        once a pack holds it. Returns how many of ``_entries`` it holds and the steps it holds;
        ``None`` if it was not written (a pack is a copy: the tail and loose records hold the steps)."""
        for _ in range(5):
            if self.superseded_by is not None:
                return None
            with self._lock:
                count = len(self._entries)
                keys = set(self.records)
                foreign = {k: v for k, v in self._foreign.items() if k not in keys}
                entries = self._entries[:count] + list(foreign.values()) + list(extra or [])
                version = self._pack_token
            token = self.store.write_if(self.pack_key, self._pack_blob(pack_id, entries, closed), version)
            if token is not None:
                self._pack_token = token
                return count, keys | set(foreign)
            if self.superseded():
                return None
            found = self.store.get_versioned(self.pack_key)
            if found is not None:
                self._merge_foreign(found[0])
            self._pack_token = found[1] if found is not None else None
        return None

    def _merge_foreign(self, data: bytes) -> None:
        """The records of the pack in the store this attempt does not know (an earlier or rival
        writer's): kept for its packs, not replayed (a load reads them)."""
        _, entries, _ = _split_blob(data, PACK_MAGIC)
        with self._lock:
            for entry in entries:
                record = Record.decode(entry)
                if record is not None and record.key not in self.records and record.key not in self._waiting:
                    self._foreign.setdefault(record.key, entry)

    def _packed(self, pack_id: PackId, count: int, keys: set[StepKey]) -> None:
        """A pack holding the first ``count`` entries and the steps ``keys`` is durable: later
        tails continue it, and the loose records of those steps go (no second copy)."""
        with self._lock:
            if count >= self._pack_count:
                self._pack_id, self._pack_count = pack_id, count
            new = keys - self._packed_keys
            self._packed_keys |= new
            doomed = [key for key in new if key in self._loose_made and key not in self._loose_pending]
        self._delete_loose(doomed)

    def _pack_soon(self) -> None:
        """Rewrite the pack with every record in a background thread (never on a step's path);
        a request while one is being written makes it write once more afterwards."""
        with self._lock:
            if self._packer is not None:
                self._pack_again = True
                return
            self._packer = threading.Thread(target=self._write_packs, name="tether-journal-pack", daemon=True)
            self._packer.start()

    def _write_packs(self) -> None:
        while True:
            pack_id = self._next_pack_id()
            with self._lock:
                self._pack_again = False
            try:
                if (packed := self._write_pack(pack_id, closed=False)) is not None:  # atomic: old or new
                    self._packed(pack_id, *packed)
            except StoreError:
                pass  # failing to write a pack changes nothing: the tail and loose records hold the steps
            with self._lock:
                if not self._pack_again:
                    self._packer = None
                    return

    def _tail_through(self, version: int) -> None:
        """Return once a durable tail holds the records of write ``version`` (a group commit: one
        tail write at a time, each carrying every record the pack lacks, those in flight too).
        Raises ``StoreError`` if the write meant to hold them failed."""
        while True:
            with self._tail_changed:
                while self._tail_busy and self._tail_durable < version:
                    self._tail_changed.wait()
                if self._tail_durable >= version:
                    return
                self._tail_busy = True
                upto = self._tail_version
                # A step is added at the end of a growing tail, with what it lacks; now and then
                # (and where the store cannot append) the tail is rewritten with what the pack lacks.
                lacks = len(self._tail_lacks)
                added = self._tail_lacks + [data for v, data in self._in_flight.items() if v > self._tail_durable]
                grow = self.store.appends and self._tail_entries >= 0 and self._tail_entries + len(added) <= TAIL_APPENDS
                entries = added if grow else self._entries[self._pack_count :] + list(self._in_flight.values())
                base, token = self._pack_id, self._tail_token
            written = False
            try:
                if self.superseded_by is None:
                    # The same write again while the store does not answer (tether.stores.outage):
                    # a rewrite whose answer was lost finds its own bytes (``_write_tail``), fence
                    # kept; a failed append added nothing.
                    write = (
                        functools.partial(self._append_tail, entries, token)
                        if grow
                        else functools.partial(self._write_tail, self._tail_blob(base, entries), token, len(entries))
                    )
                    written = patiently(write, "a journal write")
                if not written:
                    raise Superseded(self.superseded() or f"the journal tail of run {self.scope} was written by another process")
            finally:
                with self._tail_changed:
                    self._tail_busy = False
                    if written:
                        self._tail_durable = max(self._tail_durable, upto)
                        del self._tail_lacks[:lacks]
                    self._tail_changed.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """End of the attempt: list the journal, read what other processes recorded meanwhile,
        and write the pack as closed by this attempt, then a tail continuing it (empty; holding what
        the last durable pack lacks if this one failed), so the next one loads without a listing
        and claims the next number at once. Never raises (the next load then lists)."""
        for thread in (self._repairer, self._packer):
            if thread is not None:
                thread.join(timeout)
        if self._announcer is not None:
            self._announcer.close()
        if self.superseded_by is not None:
            return  # a newer attempt owns the journal now
        try:
            keys = self.store.list(self.prefix)
            names = [k for k in keys if k.endswith(".rec")]
            unknown = [k for k in names if self._key_of(k) not in self.records]
            for name, data in self.store.get_many(unknown).items():
                self._add(name, data)
            self._settle()
            pack_id = self._next_pack_id()
            with self._lock:
                in_flight = list(self._in_flight.values())
                version = self._tail_token
                since, base = self._entries[self._pack_count :] + in_flight, self._pack_id

            def tail(packed: bool) -> bytes:
                """Empty and continuing the closing pack once it is durable; else holding what
                the last durable pack lacks (a step may have no other copy: ``single_copy``)."""
                return self._tail_blob(pack_id if packed else base, [] if packed else since)

            if in_flight:  # steps not yet durable: only once the tail says this attempt still owns the journal
                packed = self._write_pack(pack_id, True, in_flight) if self._write_tail(tail(False), version, len(since)) else None
            else:
                packed = self._write_pack(pack_id, True)
                self._write_tail(tail(packed is not None), version, 0 if packed is not None else len(since))
            if packed is not None:
                self._packed(pack_id, *packed)
                # Every loose record the pack holds goes, those earlier attempts left too.
                self._delete_loose({key for key in map(self._key_of, names) if key in packed[1]})
        except StoreError:
            pass

    def _object_key(self, key: StepKey) -> str:
        kind, fp, occ = key
        return f"{self.prefix}{kind}/{fp}-{occ}.rec"

    def _key_of(self, name: str) -> StepKey:
        kind, _, rest = name[len(self.prefix) :].partition("/")
        fp, _, occ = rest.removesuffix(".rec").rpartition("-")
        return (kind, fp, int(occ or 0))

    # -- one step ----------------------------------------------------------------------------
    def claim(self, kind: str, fingerprint: str) -> tuple[Record | None, StepKey]:
        """A tool step needs its key before it runs (its idempotency key comes from it): the
        lowest recorded occurrence of this call not used yet by this attempt (counted as
        replayed: the record is returned), else the lowest occurrence neither recorded nor held
        by a call running now, held until the call is recorded or :meth:`release` d. Identical
        calls running in parallel are interchangeable: whichever arrives first takes the lower
        number, and completion order never matters. A call that fails without a record (a
        retryable error, a cancellation) gives its number back, so the framework's retry of it
        takes the same key and the same idempotency key, and the next attempt finds it there."""
        ident = (kind, fingerprint)
        with self._lock:  # parallel calls may arrive from several threads (sync frameworks)
            used = self._used.setdefault(ident, set())
            recorded = self._recorded.get(ident, set())
            free = [n for n in recorded if n not in used]
            if free:
                n = min(free)
                used.add(n)
                self.counters.count(kind, replayed=True)
                self._unused[kind] -= 1
                return self.records[(kind, fingerprint, n)], (kind, fingerprint, n)
            if self._unused.get(kind, 0) > 0 and self.counters.first_divergence is None:
                self.counters.first_divergence = {"kind": kind, "step": self._step(), "attempt": self.attempt, "fingerprint": fingerprint}
            writing = self._writing.setdefault(ident, set())
            n = 1
            while n in recorded or n in writing:
                n += 1
            writing.add(n)
            return None, (kind, fingerprint, n)

    def release(self, key: StepKey) -> None:
        """Give back a claimed occurrence whose call ended without a record (no-op once recorded)."""
        with self._lock:
            if key not in self.records:
                self._writing.get((key[0], key[1]), set()).discard(key[2])

    def replay(self, key: StepKey) -> Record | None:
        """The recorded step, counted as replayed; or ``None`` (a miss: the step runs live and is
        counted when its record is appended)."""
        kind = key[0]
        with self._lock:
            record = self.records.get(key)
            if record is not None:
                self.counters.count(kind, replayed=True)
                self._unused[kind] -= 1
                return record
            if self._unused.get(kind, 0) > 0 and self.counters.first_divergence is None:
                self.counters.first_divergence = {"kind": kind, "step": self._step(), "attempt": self.attempt, "fingerprint": key[1]}
            return None

    def _step(self) -> int:
        """The index of the step now asked for: steps done so far + 1 (a retried request, or one
        whose outcome was not recorded, is not a step)."""
        c = self.counters
        return c.model_live + c.model_replayed + c.tool_live + c.tool_replayed + 1

    def replay_next(self, kind: str, fingerprint: str) -> Record | None:
        """The lowest recorded occurrence of this request not used yet by this attempt, counted as
        replayed; or ``None`` (a miss: the request runs live and takes its occurrence in
        :meth:`append_next` if its outcome is recorded)."""
        with self._lock:
            used = self._used.setdefault((kind, fingerprint), set())
            free = [n for n in self._recorded.get((kind, fingerprint), ()) if n not in used]
            if free:
                n = min(free)
                used.add(n)
                self.counters.count(kind, replayed=True)
                self._unused[kind] -= 1
                return self.records[(kind, fingerprint, n)]
            if self._unused.get(kind, 0) > 0 and self.counters.first_divergence is None:
                self.counters.first_divergence = {"kind": kind, "step": self._step(), "attempt": self.attempt, "fingerprint": fingerprint}
            return None

    def append_next(self, record: Record) -> StepKey:
        """Durably write a live outcome at the lowest occurrence of its request that is neither
        recorded nor being written (a corrupt record's slot counts as free and is overwritten).
        The occurrence is fixed here, not when the request arrived: see the module docstring.
        Raises ``StoreError`` like :meth:`append`; the occurrence is then free again."""
        ident = (record.kind, record.fingerprint)
        with self._lock:
            taken = self._recorded.get(ident, set()) | self._writing.setdefault(ident, set())
            n = 1
            while n in taken:
                n += 1
            self._writing[ident].add(n)
        record.occurrence = n
        try:
            self.append(record)
        finally:
            with self._lock:
                self._writing[ident].discard(n)
        return record.key

    def append(self, record: Record, *, replayed: bool = False) -> None:
        """Durably write a completed step and count it (``replayed`` for a result reused from
        elsewhere, e.g. the cross-run tool cache). The tail holding it is written first, then the
        loose record, so a loose record that exists is always in the copies a load reads (a kill
        between the two leaves the step in the tail: the next attempt replays it). While the
        store does not answer, each write is tried again (``tether.stores.outage``: up to
        ``$TETHER_STORE_OUTAGE_SECONDS``); past that it raises ``StoreUnavailable`` (another
        ``StoreError`` at once): the step then counts as not done and the next attempt runs it
        again (a tail already holding it only hands that attempt a complete answer)."""
        record.attempt = self.attempt
        data = self._encode(record)
        with self._lock:
            self._tail_version += 1
            version = self._tail_version
            self._in_flight[version] = data
        try:
            try:
                self._tail_through(version)
            except Superseded:
                if record.key not in self._announced:
                    raise
                # A call this attempt was running when the newer one started: that one waits for
                # this record (tether.fence); loose only, the copies are the newer attempt's now.
                patiently(lambda: self._write_one_loose(record.key, data, False, quiet=False), "a journal write")
                with self._lock:
                    self.records[record.key] = record
                    self.counters.count(record.kind, replayed=replayed)
                return
            overwrite = record.key in self._corrupt_keys  # a checksum failure is overwritten, never trusted
            if not self.single_copy:  # an exclusive create that finds its record counts as written
                patiently(lambda: self._write_one_loose(record.key, data, overwrite, quiet=False), "a journal write")
            self._corrupt_keys.discard(record.key)
        finally:
            with self._lock:
                self._in_flight.pop(version, None)
        with self._lock:
            self.records[record.key] = record
            self._entries.append(data)
            self._recorded.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
            self._used.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
            self._writing.get((record.kind, record.fingerprint), set()).discard(record.occurrence)  # a claim, now recorded
            self.counters.count(record.kind, replayed=replayed)
            if record.kind == "model":
                self._recent_models.append(record.key)
            behind = len(self._entries) - self._pack_count >= PACK_EVERY
        if behind:
            self._pack_soon()
