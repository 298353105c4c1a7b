"""A clean stop of an attempt: SIGINT (Ctrl-C) or SIGTERM (a pod being deleted, ``kill``).

``tether exec`` installs the handlers (:func:`install`); a library caller of ``run_agent`` keeps
Python's own. On the first signal the attempt stops starting steps: a new live model turn or tool
call raises :class:`~tether.errors.Interrupted`; tool calls already running finish and are
recorded, and answers already handed to the framework become durable, for at most
``$TETHER_STOP_GRACE_SECONDS`` (default 30); then the agent is cancelled, progress says
``Interrupted`` and the attempt exits with ``EXIT_INTERRUPTED`` (130, as a shell reports Ctrl-C).
The next attempt replays everything that was recorded: a tool that finished during the stop never
runs again. A second signal exits at once (what was recorded stays recorded; a tool still running
then runs again next time, as after a kill).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TypeVar

from .contract import EXIT_INTERRUPTED
from .errors import Interrupted

if TYPE_CHECKING:
    from .run import Run

T = TypeVar("T")
GRACE_ENV = "TETHER_STOP_GRACE_SECONDS"

_requested = threading.Event()
_why = ""
_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
_lock = threading.Lock()


def install() -> None:
    """Handle SIGINT and SIGTERM in this process as a clean stop (main thread only)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)


def _on_signal(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    if _requested.is_set():  # the second one: stop now
        os.write(2, f"tether: {name} again: stopping at once\n".encode())
        os._exit(EXIT_INTERRUPTED)
    os.write(2, f"tether: {name}: stopping; tool calls already running finish and are recorded ({name} again: at once)\n".encode())
    request(f"interrupted by {name}")


def request(why: str) -> None:
    """Ask every attempt in this process to stop cleanly (what a signal does)."""
    global _why
    with _lock:
        _why = why
        _requested.set()
        waiters = list(_waiters)
    for loop, future in waiters:
        try:
            loop.call_soon_threadsafe(_settle, future)
        except RuntimeError:
            pass  # that loop is closed: nothing waits there any more


def requested() -> str | None:
    """Why a stop was asked for, or None."""
    return _why if _requested.is_set() else None


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _wait() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()
    with _lock:
        if _requested.is_set():
            return
        _waiters.append((loop, future))
    try:
        await future
    finally:
        with _lock:
            _waiters.remove((loop, future))


def grace_seconds() -> float:
    return float(os.environ.get(GRACE_ENV) or 30)


async def until_stopped(work: asyncio.Future[T], run: Run | None) -> T:
    """The result of ``work`` (the framework's loop), unless a stop is asked for first: then
    ``run`` starts nothing new, what runs is let finish and be recorded, ``work`` is cancelled
    and :class:`Interrupted` raised. A step reached at the wire that waits for a human
    (``Run.suspend``: an MCP tools/call) ends it the same way, raising that :class:`Suspended`."""
    stop: asyncio.Future[None] = asyncio.ensure_future(_wait())
    either: list[asyncio.Future[Any]] = [work, stop]
    if run is not None:
        either.append(asyncio.ensure_future(run.suspension()))
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in either[1:]:
            waiting.cancel()
    suspended = run.suspended if run is not None else None
    if work.done() and not requested() and suspended is None:
        return work.result()
    why = requested() or "interrupted"
    if run is not None:
        run.stopping = run.stopping or why
        await _settle_run(run, time.monotonic() + grace_seconds())
    if suspended is None and work.done() and not work.cancelled() and work.exception() is None:
        return work.result()  # it finished while the last tool calls were recorded
    work.cancel()
    try:
        await work
    except BaseException:  # cancelled, or what the stop made it raise
        pass
    if suspended is not None:
        raise suspended
    raise Interrupted(why)


async def _settle_run(run: Run, deadline: float) -> None:
    """Wait (until ``deadline``) for the tool calls running now to be recorded, and for the
    answers already handed back to be durable."""
    while any(not f.done() for f in list(run.tools_running)) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # calls on other loops (a sync framework's) are polled, not awaited
    left = deadline - time.monotonic()
    if left > 0:
        try:
            await asyncio.wait_for(run.seam.written(), left)
        except Exception:  # not durable: the next attempt asks that turn again
            pass
    if any(not f.done() for f in list(run.tools_running)):
        print(f"tether: the stop's grace ({grace_seconds():g}s, ${GRACE_ENV}) ran out with tool calls running", file=sys.stderr)
