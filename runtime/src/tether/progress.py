"""Progress of a run, published to the store for executors, the operator and ``tether status``.

``runs/<scope>/progress.json`` is rewritten atomically on every step (at most every
``interval`` seconds, and always at the end). It is written through ``tether.api.Progress``, the
model the operator reads it back with, so the two can never disagree on a field's type. Secrets
never reach it: it holds counters, usage, approvals and the (truncated) result only.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from .api import Divergence, Progress, ProgressApproval, Steps, Usage
from .approvals import list_approvals
from .errors import StoreError
from .run import Run, StepEvent
from .stores import Store

RESULT_LIMIT = 4096


def progress_key(scope: str) -> str:
    return f"runs/{scope}/progress.json"


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
            first_divergence=None if c.first_divergence is None else Divergence.model_validate(c.first_divergence),
        ),
        usage=Usage.model_validate(
            {
                "input_tokens": total.input_tokens,
                "output_tokens": total.output_tokens,
                "cached_input_tokens": total.cached_input_tokens,
                "cache_write_tokens": total.cache_write_tokens,
                "live_tokens": a.live.total,
                "replayed_tokens": a.replayed.total,
                "cost_usd": round(a.live_cost_usd + a.saved_usd, 6),
                "live_cost_usd": round(a.live_cost_usd, 6),
                "saved_usd": round(a.saved_usd, 6),
                "unpriced_models": sorted(a.unpriced_models),
            }
        ),
        approvals=[] if phase == "Running" else [approval_progress(r) for r in list_approvals(run.store, run.scope)],
        result=None if result is None else result[:RESULT_LIMIT],
        result_truncated=result is not None and len(result) > RESULT_LIMIT,
        error=error,
        updated_at=time.time(),
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


class ProgressWriter:
    """A run listener that publishes progress; a failed write never fails the run."""

    def __init__(self, run: Run, *, interval: float = 0.25) -> None:
        self.run = run
        self.interval = interval
        self._last = 0.0
        self._lock = threading.Lock()
        run.listeners.append(self.on_step)

    def on_step(self, event: StepEvent) -> None:
        if time.monotonic() - self._last >= self.interval:
            self.publish("Running")

    def publish(self, phase: str, **fields: Any) -> None:
        with self._lock:
            self._last = time.monotonic()
            try:
                write_progress(self.run.store, self.run.scope, snapshot(self.run, phase, **fields))
            except StoreError:
                pass  # progress is advisory; the journal is what counts
