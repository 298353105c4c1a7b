"""The write scheduler of the wire seam: when a live answer's record is written, and what waits
for it (see ``tether.wire.seam`` for the promise it keeps).

With ``overlap`` a live answer is handed back as soon as it arrived and its record is written
meanwhile, once the event loop turns to it (:meth:`WriteScheduler._turn`); without it the record
is durable before the answer (a stream: its last chunk) is handed back. A streamed answer is read
upstream by a pump of its own (:meth:`WriteScheduler.tee`), so a caller that stops reading early
still gets the turn recorded. A write that fails is noted and raised by the next step that waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from ..errors import RecoverableStepError, StoreAccessDenied
from .upstream import transport_errors

#: The longest a live answer's record waits for the event loop to turn to it (``WriteScheduler._turn``):
#: long enough for the framework to take the answer, short enough that the write is durable by the
#: time a framework's tool call asks for it (LangGraph reaches its tool ~10 ms after the answer: at
#: 10 ms the whole write waited in the tools phase, +4–5 ms a turn, benchmarks/peer_turns.py).
WRITE_DELAY = 0.001

#: A commit: writes one answer's record (and accounts for it), given the answer's whole body.
Commit = Callable[[bytes], Awaitable[None]]


def _open(gate: asyncio.Future[None]) -> None:
    if not gate.done():
        gate.set_result(None)


_END = object()


class WriteScheduler:
    """The records of one seam's live answers: written in answer order, waited for by what follows."""

    def __init__(self, *, overlap: bool = False) -> None:
        #: Hand live answers back while their records are written (see the module docstring).
        self.overlap = overlap
        self._pumps: set[asyncio.Task[None]] = set()  # strong refs: a pump outlives an early-closing reader
        #: Live answers already handed back whose records are being written (tasks; pumps join in
        #: once their stream ended), and the first such write that failed.
        self._commits: set[asyncio.Task[None]] = set()
        self._unwritten: BaseException | None = None
        #: Records waiting for the event loop to turn to them (see :meth:`_turn`), and how many
        #: callers wait for records now (a record then starts at once).
        self._gates: list[asyncio.Future[None]] = []
        self._waiting = 0
        #: How long the end of the attempt waits for streams still being recorded.
        self.settle_timeout = 60.0

    async def settle(self, timeout: float | None = None) -> int:
        """Wait until every stream still being read upstream is recorded (or failed), at most
        ``timeout`` seconds; a pump still running then is cancelled, so nothing is written after
        the attempt ended (its turn runs again next attempt). Pumps live on the loop that served
        their request: those of another running loop are awaited there. Returns how many were
        cancelled."""
        timeout = self.settle_timeout if timeout is None else timeout
        async with self._awaiting():
            waits = self._waits(self._pumps | self._commits)
            if waits:
                await asyncio.wait(waits, timeout=timeout)
        late = [t for t in list(self._pumps) if not t.done()]
        for task in late:
            task.get_loop().call_soon_threadsafe(task.cancel)
        return len(late)

    @staticmethod
    def _waits(tasks: set[asyncio.Task[None]]) -> list[asyncio.Future[Any]]:
        """A future per task, awaitable from this loop (tasks of another running loop are awaited
        there)."""
        here = asyncio.get_running_loop()
        waits: list[asyncio.Future[Any]] = []
        for task in list(tasks):
            loop = task.get_loop()
            if loop is here:
                waits.append(task)
            elif loop.is_running():
                waits.append(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(asyncio.wait([task]), loop)))
        return waits

    async def recorded(self) -> None:
        """Wait until every answer handed back and every stream being read upstream now is
        recorded; cancels nothing. Raises ``RecoverableStepError`` if a write failed."""
        async with self._awaiting():
            waits = self._waits(self._pumps | self._commits)
            if waits:
                await asyncio.wait(waits)
        self.check_written()

    async def written(self, but: asyncio.Task[None] | None = None) -> None:
        """Wait until the answers already handed back (``but`` this one's) are durable, not the
        streams still being read (a parallel turn's answer does not wait for its sibling); raise
        if a write failed."""
        async with self._awaiting():
            waits = self._waits(self._commits - {but} if but is not None else self._commits)
            if waits:
                await asyncio.wait(waits)
        self.check_written()

    def check_written(self) -> None:
        """Raise if an answer already handed back could not be recorded."""
        failed = self._unwritten
        if failed is None:
            return
        if isinstance(failed, StoreAccessDenied):
            raise failed  # terminal: the credentials will not change on the next attempt
        raise RecoverableStepError(f"an answer already handed back could not be recorded, so this attempt stops: {failed}") from failed

    @contextlib.asynccontextmanager
    async def _awaiting(self) -> AsyncIterator[None]:
        """While a caller waits for records, none waits for its turn."""
        self._waiting += 1
        self.open_gates()
        try:
            yield
        finally:
            self._waiting -= 1

    def open_gates(self) -> None:
        """Start the records waiting for their turn now (the loop is about to wait for the network)."""
        gates, self._gates = self._gates, []
        here = asyncio.get_running_loop()  # called from a step on a loop
        for gate in gates:
            if gate.get_loop() is here:
                _open(gate)  # no wake-up through the loop's self-pipe for a gate of this loop
                continue
            with contextlib.suppress(RuntimeError):  # its loop is closed: nothing waits there
                gate.get_loop().call_soon_threadsafe(_open, gate)

    async def _turn(self) -> None:
        """Wait until the event loop turns to writing a record: when something waits for it
        (:meth:`written`, :meth:`recorded`, :meth:`settle`: a tool call, the next answer, the end
        of the attempt), when the next request goes upstream (the loop then waits for the network),
        or ``WRITE_DELAY`` after the answer was handed back, whichever comes first. Started
        before the loop handed the answer on, the write's threads would compete for the
        interpreter lock with the framework taking it (~0.8 ms a turn when records held the
        whole conversation, benchmarks/record_overhead.py)."""
        if self._waiting:
            return
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        self._gates.append(gate)
        timer = loop.call_later(WRITE_DELAY, _open, gate)
        try:
            await gate
        finally:
            timer.cancel()

    def _committing(self, commit: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Write a record after its answer was handed back (see the module docstring)."""

        earlier = set(self._commits)

        async def run() -> None:
            try:
                # In answer order: a record starts once the one before it counted, so "killed
                # after turn k was recorded" never finds turn k+1 recorded beside it.
                waits = self._waits(earlier)
                if waits:
                    await asyncio.wait(waits)
                await self._turn()
                await commit()
            except Exception as e:  # noted; the next step raises it
                if self._unwritten is None:
                    self._unwritten = e

        task = asyncio.ensure_future(run())
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)
        return task

    async def whole(self, commit: Commit, body: bytes) -> None:
        """Record a whole (not streamed) answer before it is handed back, or with ``overlap``
        once the answers handed back before it are durable (its own record follows)."""
        # A task of its own: a caller that gave up (a proxy client that disconnected) after
        # the answer arrived does not cut the record in two (written, but never counted).
        if self.overlap:
            own = self._committing(functools.partial(commit, body))
            await self.written(but=own)  # the answers handed back before this one are durable first
        else:
            await asyncio.shield(asyncio.ensure_future(commit(body)))

    async def tee(self, response: httpx.Response, commit: Commit) -> AsyncIterator[bytes]:
        """Pass a stream through as it arrives and record it whole once it ended.

        A pump task reads upstream independently of the consumer, so a caller that stops
        reading early (many SDKs close the response once they saw the final event) still gets
        the step recorded. The last chunk waits for the record (or, with ``overlap``, for the
        answers handed back before this one: its own record is written after it).
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()  # chunks, then _END or the error

        async def pump() -> None:
            chunks: list[bytes] = []
            held: bytes | None = None
            try:
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    if held is not None:
                        queue.put_nowait(held)
                    held = chunk
                body = b"".join(chunks)
                own = self._committing(functools.partial(commit, body)) if self.overlap else None
                await (self.written(but=own) if own is not None else commit(body))
                if held is not None:
                    queue.put_nowait(held)
                queue.put_nowait(_END)
                if own is not None:
                    await own
            except transport_errors() as e:
                broke = RecoverableStepError(f"upstream stream broke: {type(e).__name__}")
                broke.__cause__ = e
                queue.put_nowait(broke)
            except BaseException as e:
                queue.put_nowait(e)
                if isinstance(e, asyncio.CancelledError):
                    raise  # cancelled by settle(): it did not finish, and shows so
            finally:
                await response.aclose()

        task = asyncio.ensure_future(pump())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # A consumer that left early does not cancel the pump: it finishes and records alone.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
