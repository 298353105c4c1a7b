"""Progress of a run, published to the store for executors, the operator and ``tether status``.

``runs/<scope>/progress.json`` is rewritten atomically on every step (at most every
``interval`` seconds, and always at the end). It is written through ``tether.contract.Progress``,
the model the operator reads it back with, so the two can never disagree on a field's type.
Secrets never reach it: it holds counters, usage, approvals and the (truncated) result only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .api import Divergence, Steps, Usage
from .approvals import list_approvals
from .contract import STEP_LINES_END, Progress, ProgressApproval, attempt_log_key, step_lines_key
from .contract import progress_key as progress_key  # where the operator reads it
from .errors import StoreError
from .run import Run, StepEvent
from .stores import Store
from .stores.local import LocalStore
from .stores.outage import patiently

RESULT_LIMIT = 4096


def read_progress(store: Store, scope: str) -> dict[str, Any] | None:
    data = store.get(progress_key(scope))
    return None if data is None else json.loads(data)


def snapshot(run: Run, phase: str, *, result: str | None = None, error: str | None = None) -> Progress:
    """The run's progress as the API's ``Progress`` model: the one type the operator reads back."""
    c, a = run.counters, run.accounting
    total = a.total
    return Progress(
        phase=phase,
        attempt=run.attempt,
        steps=Steps(
            model_live=c.model_live,
            model_replayed=c.model_replayed,
            tool_live=c.tool_live,
            tool_replayed=c.tool_replayed,
            run_model_live=a.earlier_model_live + c.model_live,
            run_tool_live=a.earlier_tool_live + c.tool_live,
            normalised_parts=run.normalised_parts,
            first_divergence=None if c.first_divergence is None else Divergence.model_validate(c.first_divergence),
        ),
        usage=Usage.model_validate(
            {
                "input_tokens": total.input_tokens,
                "output_tokens": total.output_tokens,
                "cached_input_tokens": total.cached_input_tokens,
                "cache_write_tokens": total.cache_write_tokens,
                "live_tokens": a.live.total,
                "run_live_tokens": (a.earlier_live + a.live).total,
                "replayed_tokens": a.replayed.total,
                "cost_usd": round(a.live_cost_usd + a.saved_usd, 6),
                "live_cost_usd": round(a.live_cost_usd, 6),
                "saved_usd": round(a.saved_usd, 6),
                "run_live_cost_usd": round(a.run_live_cost_usd, 6),
                "run_unknown_cost_turns": a.run_unknown_cost,
                "framework_cost_usd": None if run.framework_cost_usd is None else round(run.framework_cost_usd, 6),
                "unpriced_models": sorted(a.unpriced_models),
                "unknown_cost_turns": a.unknown_cost_live,
                "unknown_saved_turns": a.unknown_cost_replayed,
            }
        ),
        approvals=[] if phase == "Running" else [approval_progress(r) for r in list_approvals(run.store, run.scope)],
        mcp_tools=run.mcp_tools,
        result=None if result is None else result[:RESULT_LIMIT],
        result_truncated=result is not None and len(result) > RESULT_LIMIT,
        error=error,
        updated_at=time.time(),
        first_replay_at=c.first_replay_at,
    )


def approval_progress(request: dict[str, Any]) -> ProgressApproval:
    """An approval request (with its decision, if any) as ``list_approvals`` returns it."""
    decision = request["decision"] or {}
    return ProgressApproval(
        id=request["id"],
        tool=request["tool"],
        prompt=request["prompt"],
        arguments=json.dumps(request["arguments"], sort_keys=True)[:512],
        requested_at=request["requestedAt"],
        decision=None if not decision else ("approved" if decision["approved"] else "declined"),
        by=decision.get("by"),
        decided_at=decision.get("decided_at"),
        reason=decision.get("reason"),
    )


def write_progress(store: Store, scope: str, progress: Progress) -> None:
    store.put(progress_key(scope), json.dumps(progress.wire()).encode())


def attempt_log(run: Run, progress: Progress) -> dict[str, Any]:
    """The attempt's end as the run view reads it (``tether.runview``): its final progress and
    its steps in the order they began, each naming the journal record it replayed or wrote. Counters, usage and
    step keys only: no content, no secret."""
    return {
        "progress": progress.wire(),
        "startedAt": run.started_at,
        "events": [
            {
                "kind": e.kind,
                "name": e.name,
                "mode": e.mode,
                "outcome": e.outcome,
                "tokens": e.usage.total,
                "costUSD": round(e.cost_usd, 6),
                "durationMs": round(e.duration_ms, 1),
                "key": None if e.key is None else list(e.key),
                "startedAt": e.started_at,
            }
            for e in sorted(run.events, key=lambda e: e.started_at)
        ],
    }


def step_text(index: int, kind: str, name: str, mode: str, tokens: int, cost_usd: float, outcome: str) -> str:
    """One step's line, as ``tether exec`` prints it and ``tether logs`` shows it."""
    what = f"turn  {name}" if kind == "model" else f"tool  {name}"
    tokens_ = f"{tokens:>6} tok" if kind == "model" else " " * 10
    cost = f"${cost_usd:.5f}" if kind == "model" else ""
    err = "  (error)" if outcome == "error" else ""
    return f"  step {index:>3}  {mode:<8}  {what:<32} {tokens_}  {cost}{err}"


def unknown_cost_note(usage: dict[str, Any]) -> str:
    """What the summary adds when some turns' cost is unknown: the figures are lower bounds."""
    live, saved = usage.get("unknownCostTurns", 0), usage.get("unknownSavedTurns", 0)
    parts = [f"{n} {what} turn(s) of unknown cost" for n, what in ((live, "live"), (saved, "replayed")) if n]
    return f" (at least: {', '.join(parts)})" if parts else ""


def run_spend_note(usage: dict[str, Any]) -> str:
    """The run's live spend over all its attempts (what limits.maxCostUSD counts), beside the
    last attempt's figures."""
    unknown = usage.get("runUnknownCostTurns", 0)
    more = f" (at least: {unknown} live turn(s) of unknown cost)" if unknown else ""
    return f"run total over all attempts: ${usage.get('runLiveCostUSD', 0):.6f} live{more}"


def advisory(store: Store) -> Store:
    """The store progress is written to: on a local directory, without an fsync per write.
    Progress is advisory (the journal is what counts) and read back from the same machine's page
    cache; an fsync per document cost a finished run's replay two disk flushes in a row."""
    if isinstance(store, LocalStore) and store.fsync:
        return LocalStore(store.root, fsync=False)
    return store


#: The progress writers of this process's runs (a deliberate kill publishes them first).
_WRITERS: weakref.WeakSet[ProgressWriter] = weakref.WeakSet()


def flush_progress(timeout: float = 2.0) -> None:
    """Publish every run's latest progress now and wait (bounded): before the process kills
    itself on purpose (``--kill-after``), so what is read afterwards agrees with the journal."""
    for writer in list(_WRITERS):
        writer.flush(timeout)


class ProgressWriter:
    """A run listener that publishes progress; a failed write never fails the run.

    Writes go through one worker thread of their own, in order: a step reported on the event
    loop never waits for the store (tens of milliseconds per write on S3).
    """

    def __init__(self, run: Run, *, interval: float = 0.25) -> None:
        self.run = run
        self._store = advisory(run.store)
        self.interval = interval
        self._last = 0.0
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-progress")
        #: A step inside the interval is published at the interval's end (not only with the next
        #: step, which may never come: a process killed then would show one step less for good).
        self._later: threading.Timer | None = None
        self._lock = threading.Lock()
        self._closed = False
        run.listeners.append(self.on_step)
        _WRITERS.add(self)

    def on_step(self, event: StepEvent) -> None:
        with self._lock:
            if self._closed:
                return  # a step reported after the attempt's end (a late thread): its final snapshot stands
            wait = self.interval - (time.monotonic() - self._last)
            if wait > 0:
                if self._later is None:
                    self._later = threading.Timer(wait, self._catch_up)
                    self._later.daemon = True
                    self._later.start()
                return
            self._last = time.monotonic()
        # Taken now, where the run's counters live; a "Running" snapshot reads no store.
        document = snapshot(self.run, "Running")
        with contextlib.suppress(RuntimeError):  # closed meanwhile: the final snapshot says more
            self._writer.submit(self._put, lambda: document)

    def _catch_up(self) -> None:
        with self._lock:  # held while submitting: close() shuts the writer down under it
            if self._later is None or self._closed:
                return  # the run ended meanwhile: its final snapshot says more
            self._later = None
            self._last = time.monotonic()
            self._writer.submit(self._put, lambda: snapshot(self.run, "Running"))

    def _cancel_later(self) -> None:
        with self._lock:
            if self._later is not None:
                self._later.cancel()
                self._later = None

    def _put(self, document: Callable[[], Progress]) -> None:
        if self.run.superseded_by:
            return  # a newer attempt of the run has started: the run's progress is its now
        try:
            write_progress(self._store, self.run.scope, document())
        except StoreError:
            pass  # progress is advisory; the journal is what counts

    def _final(self, phase: str, fields: dict[str, Any], durable: bool = False) -> Future[None]:
        # A final snapshot lists approvals (store reads): taken on the writer thread, after every
        # earlier write; the run has stopped changing by then. The attempt's log goes beside it.
        self._cancel_later()
        self._last = time.monotonic()
        return self._writer.submit(self._put_final, phase, fields, durable)

    def _put_final(self, phase: str, fields: dict[str, Any], durable: bool) -> None:
        try:
            if self.run.journal.superseded():  # one read, once per attempt: a zombie's end says nothing
                return
        except Exception:
            pass  # not loaded, the store down: the snapshot says so or fails quietly below
        if durable:  # the run's result: waited for while the store does not answer, else raised
            document = patiently(lambda: snapshot(self.run, phase, **fields), "the run's result")  # approvals are read
            if not self.run.superseded_by:
                patiently(lambda: write_progress(self._store, self.run.scope, document), "the run's result")
        else:
            document = snapshot(self.run, phase, **fields)
            self._put(lambda: document)
        try:
            log = attempt_log(self.run, document)
            self._store.put(attempt_log_key(self.run.scope, self.run.attempt), json.dumps(log).encode())
        except StoreError:
            pass  # advisory too: the run view then shows the attempt from its journal records

    def flush(self, timeout: float) -> None:
        """Publish the run's latest snapshot now (a step inside the interval included) and wait
        for it, at most ``timeout`` seconds."""
        with self._lock:
            if self._later is not None:
                self._later.cancel()
                self._later = None
            self._last = time.monotonic()
            try:
                done = self._writer.submit(self._put, lambda: snapshot(self.run, "Running"))
            except RuntimeError:  # closed: the run's final snapshot is written
                return
        try:
            done.result(timeout)
        except Exception:
            pass  # progress is advisory

    def publish(self, phase: str, *, durable: bool = False, **fields: Any) -> None:
        """Write a snapshot now and wait for it (for synchronous callers). ``durable``: the
        run's result, which lives here only: waited for while the store does not answer
        (``tether.stores.outage``), and raises if it could not be written; else advisory."""
        self._final(phase, fields, durable).result()

    async def apublish(self, phase: str, *, durable: bool = False, **fields: Any) -> None:
        """Write a snapshot without blocking the event loop (``durable``: see :meth:`publish`)."""
        await asyncio.wrap_future(self._final(phase, fields, durable))

    def close(self) -> None:
        """Let queued writes finish in the background and end the writer thread."""
        with self._lock:
            self._closed = True
            if self._later is not None:
                self._later.cancel()
                self._later = None
            self._writer.shutdown(wait=False)


class StepLines:
    """An attempt's step lines, kept in the store as they are printed (``tether logs`` reads and
    follows them at :func:`tether.contract.step_lines_key`). The object is rewritten whole, on a
    worker thread of its own: a step never waits for the store, and lines that come during a write
    go out together in the next one. Like progress, advisory: a failed write never fails the run."""

    def __init__(self, store: Store, run_id: str) -> None:
        self._store = advisory(store)
        self._run_id = run_id
        #: Known from the first step (the journal claims it when it loads), or set by the caller.
        self.attempt = 0
        self._lines: list[str] = []
        self._queued = False
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-step-lines")

    def add(self, line: str, attempt: int = 0) -> None:
        with self._lock:
            self.attempt = self.attempt or attempt
            self._lines.append(line)
            if self._queued or not self.attempt:
                return
            self._queued = True
        self._writer.submit(self._put)

    def _put(self) -> None:
        with self._lock:
            self._queued = False
            text = "".join(line + "\n" for line in self._lines)
            key = step_lines_key(self._run_id, self.attempt)
        try:
            self._store.put(key, text.encode())
        except StoreError:
            pass

    def flush(self, timeout: float = 2.0) -> None:
        """Write what is there now and wait for it (bounded): before a deliberate kill."""
        with self._lock:
            if not self.attempt:
                return
            self._queued = True
        try:
            self._writer.submit(self._put).result(timeout)
        except Exception:
            pass  # advisory

    def end(self, how: str) -> None:
        """The attempt's last line (``STEP_LINES_END`` and how it ended), written and waited for;
        nothing at all for an attempt that never loaded its journal (it has no number: the cause
        is in the progress record)."""
        if self.attempt:
            self.add(STEP_LINES_END + how)
            self.flush()
        self._writer.shutdown(wait=False)
