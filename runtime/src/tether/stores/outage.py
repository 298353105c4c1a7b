"""Waiting out a store that does not answer (README.md, "Durability": a store outage).

What an attempt cannot go on without — a step's journal write, the journal load, the start of a
live tool call (its announcement, its approval request, a cross-run cache read), the memory read
and commit, the run's result — goes through
:func:`patiently`: when the store does not answer (:class:`~tether.errors.StoreUnavailable`: a
refused or timed-out connection, a 5xx, throttling, after the backend's own quick retries), the
same operation is tried again with backoff while the outage lasts, up to
``$TETHER_STORE_OUTAGE_SECONDS`` (default 300) from its first failure. Past that the error is
raised and the attempt ends as store-unreachable (exit code 4, ``tether.contract``), which the
operator does not count against ``retries``. Only ``StoreUnavailable`` waits: ``Superseded``, an
access denied or any other error is raised at once.

An operation given here must be safe to repeat after a write whose answer was lost: the
journal's conditional tail write recognises its own blob in the store (``Journal._write_tail``),
an exclusive create that finds its object counts as written, the memory commit is idempotent per
writer, a ``put`` rewrites the same bytes. (The backend's own retries already repeat writes so.)
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import ConfigError, StoreUnavailable

OUTAGE_ENV = "TETHER_STORE_OUTAGE_SECONDS"
DEFAULT_OUTAGE_SECONDS = 300.0
#: The wait between two tries doubles from the first to the last, with jitter: a few hundred
#: runs waiting on one store do not come back at the same instant.
FIRST_DELAY, MAX_DELAY = 0.25, 5.0

_T = TypeVar("_T")


def outage_seconds() -> float:
    """How long an operation waits for the store (``$TETHER_STORE_OUTAGE_SECONDS``; 0: not at all)."""
    raw = os.environ.get(OUTAGE_ENV, "").strip()
    if not raw:
        return DEFAULT_OUTAGE_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # NaN too
        raise ConfigError(f"{OUTAGE_ENV}={raw!r}: a number of seconds, 0 or more")
    return seconds


def patiently(op: Callable[[], _T], what: str) -> _T:
    """``op()``, tried again while it raises ``StoreUnavailable``, for up to :func:`outage_seconds`
    from its first failure; then that error. ``what`` names the operation in the lines said on
    stderr (when it starts waiting, and when the store answers again)."""
    bound: float | None = None  # read at the first failure: nothing but the call on the step's path
    first: float | None = None
    delay = FIRST_DELAY
    while True:
        try:
            result = op()
        except StoreUnavailable as e:
            now = time.monotonic()
            if first is None or bound is None:
                first, bound = now, outage_seconds()
                if bound > 0:
                    print(
                        f"tether: the store does not answer ({e}): {what} waits for it, up to {bound:g} s ({OUTAGE_ENV})",
                        file=sys.stderr,
                        flush=True,
                    )
            left = first + bound - now
            if left <= 0:
                if bound > 0:
                    print(f"tether: the store did not answer for {now - first:.1f} s: {what} gives up", file=sys.stderr, flush=True)
                raise
            time.sleep(min(delay * random.uniform(0.5, 1.0), left))
            delay = min(delay * 2, MAX_DELAY)
            continue
        if first is not None:
            print(f"tether: the store answers again: {what} went on after {time.monotonic() - first:.1f} s", file=sys.stderr, flush=True)
        return result
