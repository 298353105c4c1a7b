"""A run attempt: the journal, the seams and the accounting of one attempt of one run scope.

``Run`` builds the wire seam and implements the port both seams talk to (``tether.attempt``:
replay, record, refuse, account). The current run is held in a context variable, so tools and
transports created inside ``with run.activate():`` find it without being handed it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

from .api import McpToolStatus
from .attempt import Decided, active
from .cost import PriceTable
from .errors import Superseded, Suspended
from .journal import Counters, Journal, Record, StepKey
from .stores import Store, open_store
from .stores.outage import patiently
from .telemetry import attempt_trace
from .usage import Usage
from .wire.providers import upstreams as resolve_upstreams
from .wire.seam import WireSeam


@dataclass
class StepEvent:
    """One step as the user sees it in progress output, status and reports."""

    index: int
    kind: str  # "model" | "tool"
    name: str  # model name or tool name
    replayed: bool
    outcome: str  # "ok" | "error"
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    duration_ms: float = 0.0
    attempt: int = 0
    #: A tool result reused from an earlier run's cache (``cache="auto"``), not this run's journal.
    cached: bool = False
    #: The journal record this step replayed or wrote (``None``: a live answer left unrecorded):
    #: what the run view links the step to (its tool arguments, its tokens).
    key: StepKey | None = None
    #: When the step began (a replay: when it was served). Steps are reported as they complete,
    #: and a live turn completes once its record is written, after the calls it asked for may
    #: have begun: the run view orders an attempt's steps by this.
    started_at: float = 0.0

    @property
    def mode(self) -> str:
        return "cached" if self.cached else "replayed" if self.replayed else "live"


@dataclass
class Accounting:
    live: Usage = field(default_factory=Usage)
    replayed: Usage = field(default_factory=Usage)
    live_cost_usd: float = 0.0
    #: Dollars the replayed turns would have cost live: what replay saved.
    saved_usd: float = 0.0
    unpriced_models: set[str] = field(default_factory=set)
    #: Successful turns whose cost is unknown (usage unreadable, or a model missing from the price
    #: table): counted, never taken as $0. ``live_cost_usd``/``saved_usd`` are then lower bounds.
    unknown_cost_live: int = 0
    unknown_cost_replayed: int = 0
    #: Live spend of the run's earlier attempts (what their recorded turns cost when they ran), and
    #: their live turns of unknown cost: with this attempt's, what ``max_cost_usd`` counts.
    earlier_live_cost_usd: float = 0.0
    earlier_unknown_cost: int = 0
    #: The earlier attempts' live steps and tokens (their records): with this attempt's, the
    #: run's, which count the same whichever attempt's progress was read (one killed before its
    #: last was is counted by the next).
    earlier_model_live: int = 0
    earlier_tool_live: int = 0
    earlier_live: Usage = field(default_factory=Usage)

    @property
    def run_live_cost_usd(self) -> float:
        return self.earlier_live_cost_usd + self.live_cost_usd

    @property
    def run_unknown_cost(self) -> int:
        return self.earlier_unknown_cost + self.unknown_cost_live

    @property
    def total(self) -> Usage:
        return self.live + self.replayed


class Run:
    """One attempt of one run scope (an AgentRun uid, or a Flyte run + action + call): a
    ``tether.attempt.Attempt``."""

    def __init__(
        self,
        scope: str,
        store: Store | str | None = None,
        *,
        upstreams: dict[str, str] | None = None,
        prices: PriceTable | None = None,
        max_cost_usd: float | None = None,
        unknown_cost: str = "stop",
        background_load: bool = False,
        overlap_writes: bool = False,
    ) -> None:
        """``background_load``: the journal loads in a thread of its own while the caller goes on
        (``run_agent`` builds the agent meanwhile: the load waits on the store, the build on the
        CPU); :meth:`loaded` waits for it, and so does any step that asks the journal earlier."""
        #: The attempt starts here: replay time counts the store and journal load too.
        self.started_at = time.time()
        self.scope = scope
        #: Live model spend at which further live turns are refused (replays are free and go on).
        self.max_cost_usd = max_cost_usd
        #: With a cost limit, what a live turn of unknown cost does: ``stop`` (fail closed: the
        #: next live turn is refused like a limit hit) or ``ignore`` (fail open: it counts as $0).
        if unknown_cost not in ("stop", "ignore"):
            raise ValueError(f"unknown_cost must be 'stop' or 'ignore', not {unknown_cost!r}")
        self.unknown_cost = unknown_cost
        #: Set when a limit refused a live turn: the reason the run failed.
        self.limit_exceeded: str | None = None
        #: Set when the attempt was asked to stop (``tether.stopping``): no new live step starts.
        self.stopping: str | None = None
        #: Set when a step reached at the wire waits for a human (:meth:`suspend`).
        self.suspended: Suspended | None = None
        self._suspension_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.store = open_store(store)
        self.upstreams = resolve_upstreams(upstreams)
        self.prices = prices or PriceTable.default()
        self._journal = Journal(self.store, scope)
        #: The attempt's OpenTelemetry spans (``tether.telemetry``; does nothing unless configured).
        self.trace = attempt_trace(scope, self.store)
        self._journal.single_copy = overlap_writes  # the tail is what counts; see tether.journal
        self.accounting = Accounting()
        self._loading: Future[Journal] | None = None
        if background_load:
            loader = ThreadPoolExecutor(1, thread_name_prefix="tether-journal-load")
            self._loading = loader.submit(self._load)
            loader.shutdown(wait=False)
        else:
            self._load()
        self.events: list[StepEvent] = []
        self._events_lock = threading.Lock()
        #: One future per live tool call running now (done when it is recorded): see tether.tools.
        self.tools_running: set[asyncio.Future[None]] = set()
        #: The MCP servers' tools the run offers, with their annotations (progress, status).
        self.mcp_tools: list[McpToolStatus] = []
        self.listeners: list[Callable[[StepEvent], None]] = []
        #: Wall time from the start of the attempt to its first live step (or until now).
        self.replay_s: float | None = None
        #: Volatile parts of this attempt's model requests the fingerprints left out (a CLI's date,
        #: kernel, working directory: see the protocol modules), so a retry elsewhere still replays.
        self.normalised_parts = 0
        #: The framework's own cost figure, where it reports one (shown beside Tether's).
        self.framework_cost_usd: float | None = None
        #: ``overlap_writes``: live answers are handed back while their records are written; what
        #: follows from them waits until they are durable (see tether.wire.seam).
        self.seam = WireSeam(self, self.upstreams, overlap=overlap_writes)

    async def loaded(self) -> None:
        """Wait for a background load; raises what it raised (e.g. the store is unavailable)."""
        if self._loading is not None:
            await asyncio.wrap_future(self._loading)

    @property
    def journal(self) -> Journal:
        """The loaded journal: a step that asks before a background load has finished waits."""
        if self._loading is not None:
            self._loading.result()
        return self._journal

    def _load(self) -> Journal:
        """Load the journal and count what the earlier attempts paid: every model record in it was
        a live turn once (a replay is never recorded again), so a budget holds for the run, not per
        attempt. A turn killed before its record was written is not there (its cost is known
        nowhere). A load the store did not answer is made again from the start, with a fresh
        journal, while the outage lasts (``tether.stores.outage``): one that failed half way may
        have claimed an attempt number, which then stays unused."""

        def load() -> Journal:
            journal = Journal(self.store, self.scope)
            journal.single_copy = self._journal.single_copy
            return journal.load()

        self._journal = patiently(load, "loading the journal")
        self.trace.loaded(self._journal, self.started_at)
        a = self.accounting
        for record in self._journal.records.values():
            if record.kind != "model":
                a.earlier_tool_live += not record.response.get("cached")  # a result reused from another run ran nothing
                continue
            usage = Usage(**record.usage) if record.usage else None
            a.earlier_model_live += 1
            a.earlier_live += usage or Usage()
            dollars = self.prices.dollars(record.model, usage) if usage is not None else None
            if dollars is not None:
                a.earlier_live_cost_usd += dollars
            elif record.outcome == "ok":
                a.earlier_unknown_cost += 1
        return self._journal

    @property
    def attempt(self) -> int:
        return self._journal.attempt  # 0 until the journal is loaded

    @property
    def superseded_by(self) -> str | None:
        """Why a newer attempt of the run owns its journal now, once this attempt knows (tether.journal)."""
        return self._journal.superseded_by

    @property
    def counters(self) -> Counters:
        return self._journal.counters

    @contextmanager
    def activate(self) -> Iterator[Run]:
        token = active.set(self)
        try:
            with self.seam.activate():
                yield self
        finally:
            active.reset(token)

    # -- the port of the seams (tether.attempt.Attempt) --------------------------------------
    def replay(self, kind: str, fingerprint: str) -> Record | None:
        return self.journal.replay_next(kind, fingerprint)

    def claim(self, kind: str, fingerprint: str) -> tuple[Record | None, StepKey]:
        return self.journal.claim(kind, fingerprint)

    def release(self, key: StepKey) -> None:
        self.journal.release(key)

    def record(self, record: Record, *, replayed: bool = False) -> None:
        with self._fenced():
            self.journal.append(record, replayed=replayed)

    def record_next(self, record: Record) -> None:
        with self._fenced():
            self.journal.append_next(record)

    @contextmanager
    def _fenced(self) -> Iterator[None]:
        """A write refused because a newer attempt started: this one starts nothing more."""
        try:
            yield
        except Superseded as e:
            self.stopping = self.stopping or str(e)
            raise
        if self._journal.superseded_by:  # a call it was running, recorded for the newer attempt
            self.stopping = self.stopping or self._journal.superseded_by

    @property
    def begins_at_once(self) -> bool:
        # No older attempt's call to wait for; an announcement is a file written without fsync.
        return self.attempt <= 1 and self.store.local

    def older_call(self, key: StepKey) -> Record | None:
        return self.journal.older_call(key)

    def announce(self, key: StepKey) -> Callable[[], None]:
        with self._fenced():
            return self.journal.announce(key)

    async def answers_recorded(self) -> None:
        await self.seam.written()

    @property
    def cost_limited(self) -> bool:
        return self.max_cost_usd is not None

    def refused(self, reason: str) -> None:
        self.limit_exceeded = reason

    def suspend(self, waiting: Suspended) -> None:
        with self._events_lock:  # from any thread (the proxy's loop)
            self.suspended = self.suspended or waiting
            self.stopping = self.stopping or str(waiting)
            waiters, self._suspension_waiters = self._suspension_waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_settle, future)
            except RuntimeError:
                pass  # that loop is closed: nothing waits there any more

    async def suspension(self) -> Suspended:
        """Returns when :meth:`suspend` was called (at once if it was)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._events_lock:
            if self.suspended is None:
                self._suspension_waiters.append((loop, future))
                waiting = True
            else:
                waiting = False
        if waiting:
            await future
        assert self.suspended is not None
        return self.suspended

    def account_normalised(self, parts: int) -> None:
        self.normalised_parts += parts

    def account_turn(self, record: Record, *, replayed: bool) -> None:
        usage = Usage(**record.usage) if record.usage else Usage()
        dollars = self.prices.dollars(record.model, usage) if record.usage else None
        if dollars is None:
            if record.usage:
                self.accounting.unpriced_models.add(record.model)
            if record.outcome == "ok":  # an error answer is not billed; an answer without a readable cost is unknown
                self._unknown_cost(replayed)
            dollars = 0.0
        if replayed:
            self.accounting.replayed += usage
            self.accounting.saved_usd += dollars
        else:
            self.accounting.live += usage
            self.accounting.live_cost_usd += dollars
        self._emit(
            StepEvent(
                0,
                "model",
                record.model,
                replayed,
                record.outcome,
                usage,
                0.0 if replayed else dollars,
                record.duration_ms,
                key=record.key,
                started_at=0.0 if replayed else record.started_at,
            )
        )
        self.trace.turn(record, replayed=replayed, cost_usd=dollars if record.usage else None)

    def account_unrecorded_turn(self, model: str) -> None:
        """A live 2xx the seam could not record (no answer in it): paid for, cost unknown."""
        self._unknown_cost(replayed=False)
        self._emit(StepEvent(0, "model", model, False, "error"))

    def _unknown_cost(self, replayed: bool) -> None:
        if replayed:
            self.accounting.unknown_cost_replayed += 1
        else:
            self.accounting.unknown_cost_live += 1

    def cost_refusal(self) -> str | None:
        """Why the next live turn may not run under ``max_cost_usd`` (the run's live spend over all
        its attempts), or ``None``."""
        limit = self.max_cost_usd
        if limit is None:
            return None
        self.journal  # noqa: B018 (loaded: the earlier attempts' spend is counted)
        a = self.accounting
        spent = f"${a.run_live_cost_usd:.4f} live over {max(self.attempt, 1)} attempt(s), ${a.live_cost_usd:.4f} in this one"
        if a.run_live_cost_usd >= limit:
            return f"tether: run {self.scope} reached its cost limit of ${limit:.2f} (limits.maxCostUSD; spent {spent})"
        if a.run_unknown_cost and self.unknown_cost == "stop":
            return (
                f"tether: run {self.scope} cannot keep to its cost limit of ${limit:.2f} (limits.maxCostUSD): the cost of "
                f"{a.run_unknown_cost} live turn(s) is unknown (usage unreadable or model not in the price table; known spend "
                f"{spent}). Set limits.unknownCost: ignore to count such turns as $0, or add the model to $TETHER_PRICES"
            )
        return None

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
        self._emit(StepEvent(0, "tool", name, replayed, outcome, duration_ms=duration_ms, cached=cached, key=key))
        self.trace.tool(name, replayed=replayed, cached=cached, outcome=outcome, duration_ms=duration_ms, record=record)

    def account_approval(self, tool: str, approval_id: str, requested_at: float, decision: Decided) -> None:
        self.trace.approval(tool, approval_id, requested_at, decision)

    def _emit(self, event: StepEvent) -> None:
        if not event.started_at:
            event.started_at = time.time() - (0.0 if event.replayed else event.duration_ms / 1000)
        with self._events_lock:  # parallel tool calls may report from several threads
            event.index = len(self.events) + 1
            event.attempt = self.attempt
            if not event.replayed and self.replay_s is None:
                self.replay_s = time.time() - self.started_at
            self.events.append(event)
        for listener in list(self.listeners):
            listener(event)

    async def aclose(self) -> None:
        if self.seam.proxy_tokens:  # served by the loopback proxy (imported only then: it is heavy)
            from .wire.proxy import shared_proxy

            shared_proxy().unregister(self)
        await self.seam.aclose()
        try:
            await self.loaded()
        except Exception:
            return  # never loaded: nothing to pack
        await asyncio.to_thread(self._journal.close)  # the pack the next attempt loads in one read


def current_run() -> Run | None:
    """The run attempt active in this context (``with run.activate():``), or ``None``."""
    attempt = active.get()
    return attempt if isinstance(attempt, Run) else None


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
