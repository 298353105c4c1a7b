"""The attempt as the seams see it: the port the wire seam and the tool seam talk to.

A seam needs four things of the attempt it serves, and only these:

    replay   a step recorded by an earlier attempt (``replay``; a tool call ``claim``s its key first)
    record   a live step's outcome, durably (``record``, ``record_next``, ``answers_recorded``)
    refuse   a step the attempt may not start (``stopping``, ``announce``, ``cost_refusal``, ``refused``,
             ``suspend``)
    account  every step, replayed or live: counters, cost, step events (``account_*``)

``tether.run.Run`` implements it (the run builds the seams, so nothing below it imports it). The
attempt active in this context lives here too (``Run.activate()`` sets it): tools created without
being handed their attempt find it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Protocol

from .errors import Suspended
from .journal import Record, StepKey
from .stores import Store


class Attempt(Protocol):
    """One attempt of one run scope, as the wire seam (``tether.wire.seam``) and the tool seam
    (``tether.tools``) use it."""

    #: The run scope (an AgentRun uid, or a Flyte run + action + call): keys idempotency and approvals.
    scope: str
    #: The run's store: the cross-run tool cache and approval requests live there beside the journal.
    store: Store
    #: Set when the attempt was asked to stop (``tether.stopping``): no new live step starts.
    stopping: str | None
    #: One future per live tool call running now (done when it is recorded).
    tools_running: set[asyncio.Future[None]]

    # -- replay ------------------------------------------------------------------------------
    def replay(self, kind: str, fingerprint: str) -> Record | None:
        """The next recorded occurrence of this request not used yet by this attempt (counted as
        replayed), or ``None``: it runs live and takes its occurrence when recorded."""
        ...

    def claim(self, kind: str, fingerprint: str) -> tuple[Record | None, StepKey]:
        """A step's key before it runs (a tool call's idempotency key comes from it): the recorded
        step if there is one, else a key held until it is recorded or released."""
        ...

    def release(self, key: StepKey) -> None:
        """Give back a claimed key whose step ended without a record."""
        ...

    @property
    def begins_at_once(self) -> bool:
        """Whether :meth:`older_call` and :meth:`announce` neither wait nor make a network round
        trip (the run's first attempt, on a local store): a live call begins on the event loop."""
        ...

    def older_call(self, key: StepKey) -> Record | None:
        """The record of this call by an older attempt that was running it when this one started,
        once written (blocking: waits while it runs; ``tether.fence``), counted as replayed; or
        ``None``: this attempt runs it."""
        ...

    # -- record ------------------------------------------------------------------------------
    def record(self, record: Record, *, replayed: bool = False) -> None:
        """Durably write a step at the key it claimed (blocking: call it in a thread). Raises
        ``StoreError`` when the store is down: the step counts as not done."""
        ...

    def record_next(self, record: Record) -> None:
        """Durably write a live answer at the lowest free occurrence of its request (blocking)."""
        ...

    async def answers_recorded(self) -> None:
        """Wait until the live answers already handed back are durable; raise if one could not be
        written. A tool call waits for this first: the turn that asked for it must be recorded."""
        ...

    # -- refuse ------------------------------------------------------------------------------
    def announce(self, key: StepKey) -> Callable[[], None]:
        """Announce a live tool call before it runs (blocking; ``tether.fence``); call what it returns
        when the call has ended. Raises ``Superseded`` if a newer attempt of the run has started:
        the call must not run (and this attempt then stops like ``stopping``)."""
        ...

    @property
    def cost_limited(self) -> bool:
        """Whether a cost limit holds (every earlier live turn's cost must count before the next)."""
        ...

    def cost_refusal(self) -> str | None:
        """Why the next live turn may not run under the cost limit, or ``None``."""
        ...

    def refused(self, reason: str) -> None:
        """A limit refused a live turn: the reason the run fails."""
        ...

    def suspend(self, waiting: Suspended) -> None:
        """A step reached outside the framework's own calls (an MCP tools/call at the wire) waits
        for a human: nothing new starts, and the attempt ends as suspended."""
        ...

    # -- account -----------------------------------------------------------------------------
    def account_turn(self, record: Record, *, replayed: bool) -> None:
        """A model turn replayed or recorded live: its usage, cost and step event."""
        ...

    def account_unrecorded_turn(self, model: str) -> None:
        """A live 2xx that could not be recorded (no answer in it): paid for, cost unknown."""
        ...

    def account_tool(
        self,
        name: str,
        *,
        replayed: bool,
        outcome: str,
        duration_ms: float = 0.0,
        cached: bool = False,
        key: StepKey | None = None,
        record: Record | None = None,
    ) -> None:
        """A tool call replayed, reused from the cross-run cache, or run live (``record``: its record)."""
        ...

    def account_approval(self, tool: str, approval_id: str, requested_at: float, decision: Decided) -> None:
        """A call of ``tool`` found its approval request decided (the wait: request to decision)."""
        ...

    def account_normalised(self, parts: int) -> None:
        """Volatile parts of a model request the fingerprint left out (see the protocol modules)."""
        ...


class Decided(Protocol):
    """A decision on an approval request, as the port reports it (``tether.approvals.Decision``)."""

    approved: bool
    by: str
    decided_at: float


active: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar("tether_run", default=None)


def current_attempt() -> Attempt | None:
    """The attempt active in this context (``Run.activate()``), or ``None``."""
    return active.get()
