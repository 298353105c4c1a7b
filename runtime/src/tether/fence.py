"""Tool calls across two attempts of one run (the fence's handshake; ``tether.journal`` refuses the
older attempt's journal writes once a newer attempt has taken the journal over).

An attempt about to run a live tool call first *announces* it (``running/<kind>/<fp>-<occ>.<attempt>.<n>`` under
the run's journal, rewritten every ``BEAT_SECONDS`` while the call runs, removed after), then checks
that no newer attempt has claimed the run. A newer attempt about to run the same call (same step
key) first looks for such an announcement by an older attempt and, while one is there and beating,
waits for that call's record instead of running it again. Each side writes before it reads the
other's write, so a call is never run by both: either the older attempt sees the newer one's claim
(and does not run it), or the newer one sees the announcement (and waits). A call announced before
the takeover may still be recorded by the older attempt (as a loose record: the journal's copies
are the newer attempt's now); the newer one adopts that record as replayed. An announcement that
stops beating for ``STALE_SECONDS`` (its process was killed) or is removed without a record (the
call failed unrecorded) lets the newer attempt run the call itself.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable

from .errors import Interrupted, StoreError
from .stores import LocalStore, Store
from .stores.outage import patiently

#: How often an announcement is rewritten while its call runs (the older attempt is alive).
BEAT_SECONDS = 1.0
#: An announcement not rewritten for this long belongs to a process that is gone.
STALE_SECONDS = 5.0
_POLL_SECONDS = 0.1

StepKey = tuple[str, str, int]


def running_prefix(prefix: str, key: StepKey) -> str:
    """Where the announcements of live calls of step ``key`` are: ``<name>.<attempt>.<n>``, one
    name per announcement (one never removes another)."""
    kind, fp, occ = key
    return f"{prefix}running/{kind}/{fp}-{occ}."


def _owner(name: str) -> int:
    """The attempt that made an announcement, from its name (0 if not one)."""
    attempt = name.rsplit(".", 2)[-2] if name.count(".") >= 2 else ""
    return int(attempt) if attempt.isdigit() else 0


@functools.lru_cache(maxsize=16)
def _unsynced(root: str) -> LocalStore:
    # In place, no temp file and rename: a waiter takes a torn announcement as a beat, and one
    # left by a kill is found stale like any other.
    return LocalStore(root, fsync=False, atomic=False)


class Announcer:
    """The announcements of one attempt's live tool calls: each written before its call runs, all
    rewritten by one thread every ``BEAT_SECONDS`` while their calls run, each removed by that
    thread once its call has ended (nothing of this on the call's path but the first write)."""

    def __init__(self, store: Store, prefix: str, attempt: int) -> None:
        if type(store) is LocalStore:  # no fsync: an announcement matters only while its writer's machine is up
            store = _unsynced(str(store.root))
        self.store, self.prefix, self.attempt = store, prefix, attempt
        self._beats: dict[str, int] = {}  # running calls' announcements, and their beat counts
        self._ended: set[str] = set()
        self._count = 0
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closing = False
        self._closed = False

    def _body(self, beat: int) -> bytes:
        return json.dumps({"attempt": self.attempt, "beat": beat}).encode()

    def announce(self, key: StepKey) -> Callable[[], None]:
        """Announce a live call of step ``key``; the function returned ends the announcement.
        Refused once the attempt has ended (:meth:`close`): nothing would end it then."""
        with self._changed:
            if self._closed:
                raise Interrupted("the attempt has ended: it starts no tool call")
            self._count += 1
            name = f"{running_prefix(self.prefix, key)}{self.attempt}.{self._count}"
        patiently(lambda: self.store.put(name, self._body(0)), "the start of a tool call")
        with self._changed:
            self._beats[name] = 0
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(target=self._beat, name="tether-tool-announce", daemon=True)
                self._thread.start()

        def end() -> None:
            with self._changed:
                self._beats.pop(name, None)
                self._ended.add(name)
                self._changed.notify()

        return end

    def close(self) -> None:
        """The attempt's end: the thread removes the ended announcements and ends (no thread
        outlives the attempt: a process that forks, like a pre-started worker, must have none)."""
        with self._changed:
            self._closing = self._closed = True
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _beat(self) -> None:
        due = time.monotonic() + BEAT_SECONDS
        while True:
            with self._changed:
                while not self._ended and not self._closing and time.monotonic() < due:
                    self._changed.wait(max(due - time.monotonic(), 0.0))
                closing = self._closing
                if closing:
                    self._thread = None
                ended, self._ended = self._ended, set()
                beats: dict[str, int] = {}
                if time.monotonic() >= due:
                    due = time.monotonic() + BEAT_SECONDS
                    for name in self._beats:
                        self._beats[name] += 1
                    beats = dict(self._beats)
            try:
                for name in ended:
                    self.store.delete(name)
                for name, n in beats.items():
                    self.store.put(name, self._body(n))
            except StoreError:
                pass  # a missed beat: a waiter allows STALE_SECONDS; a leftover is found stale
            if closing:
                return


def older_call(store: Store, prefix: str, key: StepKey, attempt: int, record_key: str) -> bytes | None:
    """If an older attempt than ``attempt`` announced a live call of step ``key`` and is still
    running it, wait for its record (at ``record_key``) and return its bytes; ``None`` at once if
    no older attempt runs it, or once its announcements are removed or stop beating."""
    names = [name for name in store.list(running_prefix(prefix, key)) if 0 < _owner(name) < attempt]
    if not names:
        return None  # none, or only this attempt's own (or a newer one's, which fences this one)
    seen: dict[str, bytes] = {}
    changed = time.monotonic()
    while True:
        recorded = store.get(record_key)
        if recorded is not None:
            return recorded
        current = store.get_many(names)
        if not current:
            return store.get(record_key)  # ended: recorded (adopt it) or not (run it)
        if current != seen:
            seen, changed = current, time.monotonic()
        if time.monotonic() - changed >= STALE_SECONDS:
            return None
        time.sleep(_POLL_SECONDS)
