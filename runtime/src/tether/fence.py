"""Tool calls across two attempts of one run (the fence's handshake; ``tether.journal`` refuses the
older attempt's journal writes once a newer attempt has taken the journal over).

An attempt about to run a live tool call first *announces* it (``running/<kind>/<fp>-<occ>`` under
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

from .errors import StoreError
from .stores import LocalStore, Store

#: How often an announcement is rewritten while its call runs (the older attempt is alive).
BEAT_SECONDS = 1.0
#: An announcement not rewritten for this long belongs to a process that is gone.
STALE_SECONDS = 5.0
_POLL_SECONDS = 0.1

StepKey = tuple[str, str, int]


def running_key(prefix: str, key: StepKey) -> str:
    kind, fp, occ = key
    return f"{prefix}running/{kind}/{fp}-{occ}"


@functools.lru_cache(maxsize=16)
def _unsynced(root: str) -> LocalStore:
    return LocalStore(root, fsync=False)


def announce(store: Store, prefix: str, key: StepKey, attempt: int) -> Callable[[], None]:
    """Write the announcement of a live call of step ``key`` by ``attempt`` and keep it beating
    in a thread of its own; the function returned ends it (the beats stop, the announcement is
    removed in the background)."""
    if type(store) is LocalStore:  # no fsync: an announcement matters only while its writer's machine is up (2 ms less per call)
        store = _unsynced(str(store.root))
    name = running_key(prefix, key)
    store.put(name, json.dumps({"attempt": attempt, "beat": 0}).encode())
    done = threading.Event()

    def beat() -> None:
        n = 0
        while not done.wait(BEAT_SECONDS):
            n += 1
            try:
                store.put(name, json.dumps({"attempt": attempt, "beat": n}).encode())
            except StoreError:
                pass  # a missed beat: the waiter allows STALE_SECONDS
        try:
            store.delete(name)
        except StoreError:
            pass  # left behind: a waiter finds it stale

    threading.Thread(target=beat, name="tether-tool-announce", daemon=True).start()
    return done.set


def older_call(store: Store, prefix: str, key: StepKey, attempt: int, record_key: str) -> bytes | None:
    """If an older attempt than ``attempt`` announced a live call of step ``key`` and is still
    running it, wait for its record (at ``record_key``) and return its bytes; ``None`` at once if
    no older attempt runs it, or once its announcement is removed or stops beating."""
    name = running_key(prefix, key)
    seen: bytes | None = None
    changed = time.monotonic()
    while True:
        current = store.get(name)
        if current is None:
            return store.get(record_key)  # ended: recorded (adopt it) or not (run it)
        try:
            owner = int(json.loads(current)["attempt"])
        except (ValueError, KeyError, TypeError):
            return None
        if owner >= attempt:
            return None  # this attempt's own, or a newer one's (which fences this one)
        if current != seen:
            seen, changed = current, time.monotonic()
        recorded = store.get(record_key)
        if recorded is not None:
            return recorded
        if time.monotonic() - changed >= STALE_SECONDS:
            return None
        time.sleep(_POLL_SECONDS)
