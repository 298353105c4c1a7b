"""One background event loop per process for the loopback proxy and the sync transport."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def wire_loop() -> asyncio.AbstractEventLoop:
    """The process's wire loop, started on first use in a daemon thread."""
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="tether-wire", daemon=True).start()
            _loop = loop
        return _loop


def run_on_wire_loop(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the wire loop and wait for it from a synchronous caller."""
    return asyncio.run_coroutine_threadsafe(coro, wire_loop()).result(timeout)
