"""The journal: an append-only record of the completed steps of one run scope (README.md, "How it works": Occurrences).

A step's key is ``(kind, fingerprint, occurrence)``. An attempt loads the whole journal once and
serves replays from memory; a live step is written before it counts as done. Records are immutable
once written: a second writer of the same key loses quietly (``create`` is exclusive), except over a
record that failed its checksum.

Every record is a loose object at its step key (the source of truth, ``<kind>/<fp>-<occ>.rec``),
and two objects at fixed keys hold copies, so a load reads known keys and never lists:

- the *pack*, every record: rewritten in the background every ``PACK_EVERY`` new records and at
  the end of the attempt (never on a step's path);
- the *tail*, the records the pack lacks: rewritten with every step, before its loose record. A
  step counts as written once both are durable (with ``loose_later``, as ``run_agent``'s runs
  use: once the tail is; the loose record follows in the background and ``close`` waits for it),
  and a loose record exists only once a tail holds it, so pack + tail hold every step written and
  every loose record, whenever the writer was killed; a load writes the loose records of steps it
  found in the tail only. Tail writes are one at a time and carry every record so far (a group
  commit: parallel steps share a write). The tail names the pack it continues (``base``); packs
  carry their own id and the id of the pack their attempt loaded.

A load is one round trip for the pack and tail (read in parallel) plus the claim of the next
attempt number, sent as soon as the small tail arrives (it names the latest attempt that wrote),
overlapping the pack's transfer and decoding. Anything unexpected — a torn or corrupt pack or tail,
a tail that continues a pack other than the one read, a claim that fails (an attempt started since
that never wrote a tail, or a rival process) — falls back to listing the journal and reading the
loose records the copies lack. Copies are only copies: a record in several counts once.

Two attempts never write one journal (the fence): the tail is written only by a conditional write
on the version its attempt last wrote or read, and a load takes the tail over (writes it as the new
attempt's, conditionally on the version it read; a changed tail is read again and merged first).
From then on the older attempt's writes are refused (:class:`~tether.errors.Superseded`: its step
counts as not done), a live tool call it would start is refused (``announce``: the next attempt's
number is claimed), and it says so on stderr; a call it was running then is still recorded (loose)
and the newer attempt waits for it (``older_call``; ``tether.fence``). Packs are written
conditionally too: a pack the newer attempt wrote is never overwritten by the older one.

On-disk record: ``<header JSON>\\n<body bytes><sha256 hex of everything before>``. A truncated or
corrupt record fails the checksum and counts as a miss.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from . import fence
from .canonical import sha256_hex
from .contract import journal_prefix
from .errors import StoreError, Superseded
from .stores import Store

Kind = Literal["model", "tool"]
Outcome = Literal["ok", "error"]
StepKey = tuple[str, str, int]

_SUM_LEN = 64
#: Records not yet in the pack that make the journal write a fresh pack (in the background).
PACK_EVERY = 8
PACK_MAGIC = b"tether-pack 2 "
TAIL_MAGIC = b"tether-tail 1 "


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

    @property
    def key(self) -> StepKey:
        return (self.kind, self.fingerprint, self.occurrence)

    def encode(self) -> bytes:
        # Shallow: ``asdict`` deep-copies the request (every message of the conversation) first.
        header = {f.name: getattr(self, f.name) for f in _HEADER_FIELDS}
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


_HEADER_FIELDS = tuple(f for f in fields(Record) if f.name != "body")


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


def _blob(magic: bytes, header: dict[str, Any], entries: list[bytes]) -> bytes:
    body = b"".join(len(d).to_bytes(8, "big") + d for d in entries)
    header = {**header, "records": len(entries), "sha256": sha256_hex(body)}
    return magic + json.dumps(header, sort_keys=True).encode() + b"\n" + body


def _split_blob(data: bytes | None, magic: bytes) -> tuple[dict[str, Any] | None, list[bytes], bool]:
    """A pack's or tail's header (``None`` if absent or unreadable), its entries, and whether it is
    whole (its checksum and count match: not torn, not corrupt)."""
    if not data or not data.startswith(magic):
        return None, [], False
    head, _, body = data.partition(b"\n")
    try:
        header = json.loads(head[len(magic) :])
    except ValueError:
        return None, [], False
    if not isinstance(header, dict):
        return None, [], False
    entries, i = [], 0
    while i + 8 <= len(body):
        size = int.from_bytes(body[i : i + 8], "big")
        entries.append(body[i + 8 : i + 8 + size])
        i += 8 + size
    whole = i == len(body) and header.get("sha256") == sha256_hex(body) and header.get("records") == len(entries)
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
    return sorted(found.values(), key=lambda r: (r.attempt, r.started_at))


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
        #: Count a step once its tail is durable and write its loose record in the background
        #: (the tail is what a load reads; ``close`` waits for these writes).
        self.loose_later = False
        self._loose_writer: ThreadPoolExecutor | None = None
        #: The versions of the tail and the pack this attempt last read or wrote: its writes of
        #: them are conditional on these (the fence); why it may no longer write, once it knows.
        self._tail_token: str | None = None
        self._pack_token: str | None = None
        self.superseded_by: str | None = None
        #: Live tool calls this attempt announced (``tether.fence``): recorded even once superseded.
        self._announced: set[StepKey] = set()
        self._announcer: fence.Announcer | None = None

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
            if pack is not None and pack_whole:
                self._pack_id = self._loaded_pack = pack.get("id")
                self._pack_count = len(self._entries)
            tail_only = [entry for entry in tail_entries if self._add_entry(entry)]
            if claim is not None and latest is not None and claim.result():
                self.attempt = latest + 1
        complete = tail_whole and _continues(tail or {}, pack if pack_whole else None)
        new_journal = tail_data is None and pack_found is None
        if not (self.attempt and (complete or new_journal)):
            self._load_listing()
        tail_only += self._take_over(tail_found[1] if tail_found is not None else None)
        if len(self._entries) - self._pack_count >= PACK_EVERY:
            self._pack_soon()
        if tail_only:
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
                blob = _blob(TAIL_MAGIC, {"attempt": self.attempt, "base": self._pack_id}, self._entries[self._pack_count :])
            if self._write_tail(blob, version):
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

    def _write_tail(self, blob: bytes, version: str | None) -> bool:
        """A conditional write of the tail; ``False`` if it changed since ``version`` (unless what is
        there is this very blob: a write whose answer was lost and retried). Raises
        :class:`Superseded` once a newer attempt has claimed the run."""
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
        if why := self.superseded():
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
        data = fence.older_call(self.store, self.prefix, key, self.attempt, self._object_key(key))
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

    def _write_pack(self, blob: bytes) -> bool:
        """A conditional write of the pack (on the version this attempt last read or wrote). A pack
        an older attempt wrote since is overwritten (it holds only records this attempt loaded);
        a newer attempt's never: ``False`` then."""
        for _ in range(2):
            if self.superseded_by is not None:
                return False
            token = self.store.write_if(self.pack_key, blob, self._pack_token)
            if token is not None:
                self._pack_token = token
                return True
            if self.superseded():
                return False
            found = self.store.get_versioned(self.pack_key)
            self._pack_token = found[1] if found is not None else None
        return False

    def _write_loose(self, entries: list[bytes]) -> None:
        """Write the loose records of steps found in the tail only (their writer was killed between
        the tail and the loose record), so every step ends up with its loose record. Exclusive
        creates: a record that exists is left as it is. In the background; failures change nothing
        (the copies hold the steps; the next attempt tries again)."""

        def create(data: bytes) -> None:
            record = Record.decode(data)
            if record is not None:
                self._write_one_loose(self._object_key(record.key), data, False)

        with ThreadPoolExecutor(min(8, len(entries)), thread_name_prefix="tether-journal-loose") as pool:
            list(pool.map(create, entries))

    def _write_one_loose(self, name: str, data: bytes, overwrite: bool, *, quiet: bool = True) -> None:
        """A loose record: exclusive create (a record that exists stays), or an overwrite of a
        corrupt one. ``quiet``: a failure changes nothing (the copies hold the step)."""
        try:
            if overwrite:
                self.store.put(name, data)
            else:
                self.store.create(name, data)
        except StoreError:
            if not quiet:
                raise

    def _load_listing(self) -> None:
        """The slow path: list the journal, read the loose records the copies lacked beside the
        claim (unless the fast path claimed already)."""
        keys = self.store.list(self.prefix)
        attempts = [k for k in keys if k.startswith(self.prefix + "attempts/")]
        loose = [k for k in keys if k.endswith(".rec") and self._key_of(k) not in self.records]
        with ThreadPoolExecutor(1, thread_name_prefix="tether-journal-load") as pool:
            claim = pool.submit(self._claim_attempt, len(attempts) + 1) if not self.attempt else None
            for name, data in self.store.get_many(loose).items():
                self._add(name, data)
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
        if record.key not in self.records:
            self._index(record, data)
        return True

    def _add_entry(self, data: bytes) -> bool:
        """A copy from a pack or tail (a corrupt one is skipped: the listing reads it loose);
        whether it was new."""
        record = Record.decode(data)
        if record is None or record.key in self.records:
            return False
        self._index(record, data)
        return True

    def _index(self, record: Record, data: bytes) -> None:
        self.records[record.key] = record
        self._entries.append(data)
        self._recorded.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
        self._unused[record.kind] = self._unused.get(record.kind, 0) + 1

    # -- the copies: pack and tail -----------------------------------------------------------
    def _next_pack_id(self) -> PackId:
        with self._lock:
            self._packs_written += 1
            return [self.attempt, self._packs_written]

    def _pack_blob(self, pack_id: PackId, entries: list[bytes], closed: bool) -> bytes:
        header = {"id": pack_id, "from": self._loaded_pack, "attempt": self.attempt, "closed_by": self.attempt if closed else None}
        return _blob(PACK_MAGIC, header, entries)

    def _packed(self, pack_id: PackId, count: int) -> None:
        """A pack holding the first ``count`` entries is durable: later tails continue it."""
        with self._lock:
            if count >= self._pack_count:
                self._pack_id, self._pack_count = pack_id, count

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
                entries = list(self._entries)
                self._pack_again = False
            try:
                if self._write_pack(self._pack_blob(pack_id, entries, closed=False)):  # atomic: old or new
                    self._packed(pack_id, len(entries))
            except StoreError:
                pass  # a pack is only a copy: failing to write one changes nothing
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
                entries = self._entries[self._pack_count :] + list(self._in_flight.values())
                header = {"attempt": self.attempt, "base": self._pack_id}
                token = self._tail_token
            written = False
            try:
                if self.superseded_by is not None or not self._write_tail(_blob(TAIL_MAGIC, header, entries), token):
                    raise Superseded(self.superseded() or f"the journal tail of run {self.scope} was written by another process")
                written = True
            finally:
                with self._tail_changed:
                    self._tail_busy = False
                    if written:
                        self._tail_durable = max(self._tail_durable, upto)
                    self._tail_changed.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """End of the attempt: list the journal, read what other processes recorded meanwhile,
        and write the pack as closed by this attempt with an empty tail continuing it, so the
        next one loads without a listing and claims the next number at once. Never raises: the
        copies are only copies (the next load then lists)."""
        with self._lock:
            loose, self._loose_writer = self._loose_writer, None
        if loose is not None:
            loose.shutdown(wait=True)
        for thread in (self._repairer, self._packer):
            if thread is not None:
                thread.join(timeout)
        if self.superseded_by is not None:
            return  # a newer attempt owns the journal now
        try:
            keys = self.store.list(self.prefix)
            unknown = [k for k in keys if k.endswith(".rec") and self._key_of(k) not in self.records]
            for name, data in self.store.get_many(unknown).items():
                self._add(name, data)
            pack_id = self._next_pack_id()
            with self._lock:
                in_flight = list(self._in_flight.values())
                entries = list(self._entries) + in_flight
                version = self._tail_token
            tail = _blob(TAIL_MAGIC, {"attempt": self.attempt, "base": pack_id}, [])
            pack = self._pack_blob(pack_id, entries, closed=True)
            if in_flight:  # steps not yet durable: only once the tail says this attempt still owns the journal
                if self._write_tail(tail, version):
                    self._write_pack(pack)
                return
            # Both at once: a tail whose pack failed continues a pack no reader finds, so it lists.
            with ThreadPoolExecutor(1, thread_name_prefix="tether-journal-close") as pool:
                packed = pool.submit(self._write_pack, pack)
                self._write_tail(tail, version)
                packed.result()
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
        between the two leaves the step in the tail: the next attempt replays it). Raises
        ``StoreError`` (e.g. ``StoreUnavailable``) if the store is down: the step then counts as
        not done and the next attempt runs it again (a tail already holding it only hands that
        attempt a complete answer)."""
        record.attempt = self.attempt
        name = self._object_key(record.key)
        data = record.encode()
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
                self._write_one_loose(name, data, False, quiet=False)
                with self._lock:
                    self.records[record.key] = record
                    self.counters.count(record.kind, replayed=replayed)
                return
            overwrite = record.key in self._corrupt_keys  # a checksum failure is overwritten, never trusted
            if self.loose_later:
                with self._lock:
                    if self._loose_writer is None:
                        self._loose_writer = ThreadPoolExecutor(4, thread_name_prefix="tether-journal-loose")
                    self._loose_writer.submit(self._write_one_loose, name, data, overwrite)
            else:
                self._write_one_loose(name, data, overwrite, quiet=False)
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
            behind = len(self._entries) - self._pack_count >= PACK_EVERY
        if behind:
            self._pack_soon()
