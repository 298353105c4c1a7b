"""The journal: an append-only record of the completed steps of one run scope (DESIGN §3).

A step's key is ``(kind, fingerprint, occurrence)``. An attempt loads the whole journal once (one
listing, parallel reads) and serves replays from memory; a live step is written before its result
is handed back. Records are immutable once written: a second writer of the same key loses quietly
(``create`` is exclusive), except over a record that failed its checksum.

Occurrences of model turns count recorded outcomes only. A request replays the lowest recorded
occurrence of its fingerprint that this attempt has not used yet (:meth:`Journal.replay_next`); a
request that misses goes live *without* an occurrence, and takes one only once its outcome is known
to be recordable (:meth:`Journal.append_next`): the lowest occurrence neither recorded nor being
written. So a 429, a 5xx, a timeout or a reset followed by the SDK's own retry never shifts the
keys (the failure took no number), and identical requests in flight together number their answers
in the order those answers were recorded: whichever request of the next attempt asks first gets
occurrence 1, and identical requests are interchangeable. Tool steps keep an occurrence fixed on
arrival (:meth:`Journal.next_key`), since a tool's idempotency key and approval id need it before
the tool runs.

On-disk record: ``<header JSON>\\n<body bytes><sha256 hex of everything before>``. A truncated or
corrupt record fails the checksum and counts as a miss.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .canonical import sha256_hex
from .errors import StoreError
from .stores import Store

Kind = Literal["model", "tool"]
Outcome = Literal["ok", "error"]
StepKey = tuple[str, str, int]

_SUM_LEN = 64
#: Loose records read one by one at load that make the load write a pack for the next attempt.
PACK_AFTER = 8


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
        header = asdict(self)
        del header["body"]
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


@dataclass
class Counters:
    model_live: int = 0
    model_replayed: int = 0
    tool_live: int = 0
    tool_replayed: int = 0
    corrupt: int = 0
    #: The first step of this attempt that missed while recorded steps of its kind were still
    #: unused: where a retry stopped following the recorded path.
    first_divergence: dict[str, Any] | None = None

    def count(self, kind: str, replayed: bool) -> None:
        attr = f"{kind}_{'replayed' if replayed else 'live'}"
        setattr(self, attr, getattr(self, attr) + 1)


class Journal:
    """The journal of one run scope, loaded for one attempt."""

    def __init__(self, store: Store, scope: str) -> None:
        self.store = store
        self.scope = scope
        self.prefix = f"journal/{scope}/"
        self.records: dict[StepKey, Record] = {}
        self.counters = Counters()
        self.attempt = 0
        self._occurrences: dict[tuple[str, str], int] = {}
        #: Recorded occurrences per ``(kind, fingerprint)``; those this attempt replayed or wrote;
        #: those being written now. Guarded by ``_lock``: seams on several loops and threads share it.
        self._recorded: dict[tuple[str, str], set[int]] = {}
        self._used: dict[tuple[str, str], set[int]] = {}
        self._writing: dict[tuple[str, str], set[int]] = {}
        self._lock = threading.Lock()
        self._unused: dict[str, int] = {"model": 0, "tool": 0}
        self._corrupt_keys: set[StepKey] = set()

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> Journal:
        """Read every record once (the newest pack, then loose records it lacks, in parallel)
        and claim the next attempt number."""
        keys = self.store.list(self.prefix)
        attempts = [k for k in keys if k.startswith(self.prefix + "attempts/")]
        packs = sorted(k for k in keys if k.startswith(self.prefix + "packs/"))
        packed = self._read_pack(packs[-1]) if packs else set()
        loose = [k for k in keys if k.endswith(".rec") and k not in packed]
        for name, data in self.store.get_many(loose).items():
            self._add(name, data)
        self.attempt = len(attempts) + 1
        while not self.store.create(f"{self.prefix}attempts/{self.attempt:05d}", str(time.time()).encode()):
            self.attempt += 1  # another process claimed it first
        if len(loose) >= PACK_AFTER:
            self._write_pack()
        return self

    def _add(self, name: str, data: bytes) -> bool:
        record = Record.decode(data)
        if record is None:
            self.counters.corrupt += 1
            self._corrupt_keys.add(self._key_of(name))
            return False
        self._index(record)
        return True

    def _index(self, record: Record) -> None:
        self.records[record.key] = record
        self._recorded.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
        self._unused[record.kind] = self._unused.get(record.kind, 0) + 1

    def _read_pack(self, name: str) -> set[str]:
        """Records of a pack, by object key; a corrupt entry is skipped (its loose record is read)."""
        data, packed, i = self.store.get(name) or b"", set(), 0
        while i + 8 <= len(data):
            size = int.from_bytes(data[i : i + 8], "big")
            record = Record.decode(data[i + 8 : i + 8 + size])
            i += 8 + size
            if record is not None and record.key not in self.records:
                self._index(record)
                packed.add(self._object_key(record.key))
        return packed

    def _write_pack(self) -> None:
        """Pack every record into one object, so the next attempt loads with one read instead of
        one per step (what makes replay from S3 cheap). Loose records stay the source of truth:
        a pack is only a copy, and failing to write one changes nothing."""
        blob = b"".join(len(d).to_bytes(8, "big") + d for d in (r.encode() for r in self.records.values()))
        try:
            self.store.create(f"{self.prefix}packs/{self.attempt:05d}.pack", blob)
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
    def next_key(self, kind: str, fingerprint: str) -> StepKey:
        """The key of the next tool step with this fingerprint: occurrence counts identical calls
        on arrival (a tool needs its key before it runs). Identical calls running in parallel are
        interchangeable, so whichever arrives first takes 1: completion order never matters."""
        with self._lock:  # parallel calls may arrive from several threads (sync frameworks)
            n = self._occurrences.get((kind, fingerprint), 0) + 1
            self._occurrences[(kind, fingerprint)] = n
        return (kind, fingerprint, n)

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
        elsewhere, e.g. the cross-run tool cache). Raises ``StoreUnavailable`` if the store is
        down: the step then counts as not done and the next attempt runs it again."""
        record.attempt = self.attempt
        name = self._object_key(record.key)
        data = record.encode()
        if record.key in self._corrupt_keys:
            self.store.put(name, data)  # a checksum failure is overwritten, never trusted
            self._corrupt_keys.discard(record.key)
        else:
            self.store.create(name, data)
        with self._lock:
            self.records[record.key] = record
            self._recorded.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
            self._used.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
            self.counters.count(record.kind, replayed=replayed)
