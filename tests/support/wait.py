"""Wait for a condition, never for a length of time: poll with a deadline and fail saying what
did not happen (and the last value seen)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> T:
    """The first truthy value of ``predicate()``; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


async def wait_for_async(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = "condition") -> T:
    """:func:`wait_for` for coroutines: the event loop keeps running while it polls."""
    deadline = time.monotonic() + timeout
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(interval)
