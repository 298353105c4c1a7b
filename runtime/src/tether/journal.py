"""The journal: an append-only record of the completed steps of one run scope (DESIGN §3).

A step's key is ``(kind, fingerprint, occurrence)``. An attempt loads the whole journal once and
serves replays from memory; a live step is written before its result is handed back. Records are
immutable once written: a second writer of the same key loses quietly (``create`` is exclusive),
except over a record that failed its checksum.

Loading costs two store round trips whatever the journal's length when the last attempt ended
cleanly: the *pack* (one object at a fixed key holding a copy of every record, written at the end
of each attempt after a listing) and the claim of the next attempt number. After a kill, the
journal is listed and the loose records the pack lacks are read in parallel beside the claim.
Loose records stay the source of truth: the pack is only a copy, also rewritten in the background
every ``PACK_EVERY`` new records, so a crash between two pack writes loses nothing (the records
after the last pack are read loose) and duplicates nothing (a record in both is one key).

On-disk record: ``<header JSON>\\n<body bytes><sha256 hex of everything before>``. A truncated or
corrupt record fails the checksum and counts as a miss.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from .canonical import sha256_hex
from .errors import StoreError
from .stores import Store

Kind = Literal["model", "tool"]
Outcome = Literal["ok", "error"]
StepKey = tuple[str, str, int]

_SUM_LEN = 64
#: Records not yet in the pack that make the journal write a fresh pack (in the background).
PACK_EVERY = 8
PACK_MAGIC = b"tether-pack 1 "


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


def _split_pack(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A pack's header (``closed_by``: the attempt whose end wrote it; ``records``; ``sha256`` of
    the entries) and its entries; an unreadable header is empty (the pack is then not trusted)."""
    if not data.startswith(PACK_MAGIC):
        return {}, b""
    head, _, entries = data.partition(b"\n")
    try:
        header = json.loads(head[len(PACK_MAGIC) :])
    except ValueError:
        return {}, entries
    return (header if isinstance(header, dict) else {}), entries


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
        #: Each record's encoded bytes (what a pack is made of) and how many the pack holds.
        self._encoded: dict[StepKey, bytes] = {}
        self._packed = 0
        self._packer: threading.Thread | None = None
        self._pack_again = False

    # -- loading -----------------------------------------------------------------------------
    def load(self) -> Journal:
        """Read every record once and claim the next attempt number.

        Fast path, two round trips whatever the journal's length: the pack, when the attempt that
        wrote it ended cleanly (it then listed the journal and packed every record, its own and
        any another process wrote), and the claim of the attempt number right after that one
        (free: nothing started since). Otherwise (that attempt was killed, or another started
        since) the journal is listed, and the loose records the pack lacks are read in parallel
        beside the claim."""
        header, entries = _split_pack(self.store.get(self.pack_key) or b"")
        closed_by = header.get("closed_by")
        with ThreadPoolExecutor(1, thread_name_prefix="tether-journal-load") as pool:
            # The claim's round trip overlaps decoding the pack; it is only kept if the pack is whole.
            fast = (
                pool.submit(self.store.create, self._attempt_key(closed_by + 1), str(time.time()).encode())
                if isinstance(closed_by, int)
                else None
            )
            packed = self._read_pack(entries)
            whole = header.get("sha256") == sha256_hex(entries) and len(packed) == header.get("records")
            if fast is not None and fast.result():
                if whole:
                    self.attempt = cast(int, closed_by) + 1
                    self._packed = len(packed)
                    return self
                self.attempt = cast(int, closed_by) + 1  # claimed, but a torn pack: list below
        keys = self.store.list(self.prefix)
        attempts = [k for k in keys if k.startswith(self.prefix + "attempts/")]
        loose = [k for k in keys if k.endswith(".rec") and k not in packed]
        with ThreadPoolExecutor(1, thread_name_prefix="tether-journal-load") as pool:
            claim = pool.submit(self._claim_attempt, len(attempts) + 1) if not self.attempt else None
            for name, data in self.store.get_many(loose).items():
                self._add(name, data)
            self.attempt = claim.result() if claim is not None else self.attempt
        self._packed = len(packed)
        if len(self.records) - self._packed >= PACK_EVERY:
            self._pack_soon()
        return self

    @property
    def pack_key(self) -> str:
        return f"{self.prefix}pack"

    def _attempt_key(self, attempt: int) -> str:
        return f"{self.prefix}attempts/{attempt:05d}"

    def _claim_attempt(self, attempt: int) -> int:
        while not self.store.create(self._attempt_key(attempt), str(time.time()).encode()):
            attempt += 1  # another process claimed it first
        return attempt

    def _add(self, name: str, data: bytes) -> bool:
        record = Record.decode(data)
        if record is None:
            self.counters.corrupt += 1
            self._corrupt_keys.add(self._key_of(name))
            return False
        self._index(record, data)
        return True

    def _index(self, record: Record, data: bytes) -> None:
        self.records[record.key] = record
        self._encoded[record.key] = data
        self._recorded.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
        self._unused[record.kind] = self._unused.get(record.kind, 0) + 1

    def _read_pack(self, entries: bytes) -> set[str]:
        """Records of a pack by object key (a corrupt entry is skipped: its loose record is read)."""
        packed: set[str] = set()
        i = 0
        while i + 8 <= len(entries):
            size = int.from_bytes(entries[i : i + 8], "big")
            entry = entries[i + 8 : i + 8 + size]
            record = Record.decode(entry)
            i += 8 + size
            if record is not None and record.key not in self.records:
                self._index(record, entry)
                packed.add(self._object_key(record.key))
        return packed

    def _pack_blob(self, entries: list[bytes], closed_by: int | None) -> bytes:
        body = b"".join(len(d).to_bytes(8, "big") + d for d in entries)
        header = {"closed_by": closed_by, "records": len(entries), "sha256": sha256_hex(body)}
        return PACK_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + body

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
            with self._lock:
                entries = list(self._encoded.values())
                self._pack_again = False
            try:
                self.store.put(self.pack_key, self._pack_blob(entries, None))  # atomic: old or new
                written = len(entries)
            except StoreError:
                written = 0  # a pack is only a copy: failing to write one changes nothing
            with self._lock:
                self._packed = max(self._packed, written)
                if not self._pack_again:
                    self._packer = None
                    return

    def close(self, timeout: float = 30.0) -> None:
        """End of the attempt: list the journal, read what other processes recorded meanwhile,
        and write the pack as closed by this attempt, so the next one loads it without a
        listing. Never raises: a pack is only a copy (the next load then lists)."""
        packer = self._packer
        if packer is not None:
            packer.join(timeout)
        try:
            keys = self.store.list(self.prefix)
            unknown = [k for k in keys if k.endswith(".rec") and self._key_of(k) not in self.records]
            for name, data in self.store.get_many(unknown).items():
                self._add(name, data)
            with self._lock:
                entries = list(self._encoded.values())
            self.store.put(self.pack_key, self._pack_blob(entries, self.attempt))
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
            self._encoded[record.key] = data
            self._recorded.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
            self._used.setdefault((record.kind, record.fingerprint), set()).add(record.occurrence)
            self.counters.count(record.kind, replayed=replayed)
            behind = len(self._encoded) - self._packed >= PACK_EVERY
        if behind:
            self._pack_soon()
