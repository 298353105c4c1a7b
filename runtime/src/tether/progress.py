"""Progress of a run, published to the store for executors, the operator and ``tether status``.

``runs/<scope>/progress.json`` is rewritten atomically on every step (at most every
``interval`` seconds, and always at the end). Keys are camelCase: the operator mirrors them into
the AgentRun status as they are. Secrets never reach it: it holds counters, usage, approvals and
the (truncated) result only.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

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


def snapshot(run: Run, phase: str, *, result: str | None = None, error: str | None = None) -> dict[str, Any]:
    c, a = run.counters, run.accounting
    total = a.total
    return {
        "phase": phase,
        "attempt": run.attempt,
        "steps": {
            "modelLive": c.model_live,
            "modelReplayed": c.model_replayed,
            "toolLive": c.tool_live,
            "toolReplayed": c.tool_replayed,
            "firstDivergence": c.first_divergence,
        },
        "usage": {
            "inputTokens": total.input_tokens,
            "outputTokens": total.output_tokens,
            "cachedInputTokens": total.cached_input_tokens,
            "cacheWriteTokens": total.cache_write_tokens,
            "liveTokens": a.live.total,
            "replayedTokens": a.replayed.total,
            "costUSD": round(a.live_cost_usd + a.saved_usd, 6),
            "liveCostUSD": round(a.live_cost_usd, 6),
            "savedUSD": round(a.saved_usd, 6),
            "unpricedModels": sorted(a.unpriced_models),
        },
        "approvals": [
            {
                "id": r["id"],
                "tool": r["tool"],
                "prompt": r["prompt"],
                "arguments": json.dumps(r["arguments"], sort_keys=True)[:512],
                "requestedAt": r["requestedAt"],
                "decision": None if r["decision"] is None else ("approved" if r["decision"]["approved"] else "declined"),
                "by": (r["decision"] or {}).get("by"),
                "decidedAt": (r["decision"] or {}).get("decided_at"),
                "reason": (r["decision"] or {}).get("reason"),
            }
            for r in list_approvals(run.store, run.scope)
        ]
        if phase != "Running"
        else [],
        "result": None if result is None else result[:RESULT_LIMIT],
        "resultTruncated": result is not None and len(result) > RESULT_LIMIT,
        "error": error,
        "updatedAt": time.time(),
    }


class ProgressWriter:
    """A run listener that publishes progress; a failed write never fails the run.

    Writes go through one worker thread of their own, in order: a step reported on the event
    loop never waits for the store (tens of milliseconds per write on S3).
    """

    def __init__(self, run: Run, *, interval: float = 0.25) -> None:
        self.run = run
        self.interval = interval
        self._last = 0.0
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-progress")
        run.listeners.append(self.on_step)

    def on_step(self, event: StepEvent) -> None:
        if time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            # Taken now, where the run's counters live; a "Running" snapshot reads no store.
            document = snapshot(self.run, "Running")
            self._writer.submit(self._put, lambda: document)

    def _put(self, document: Callable[[], dict[str, Any]]) -> None:
        try:
            self.run.store.put(progress_key(self.run.scope), json.dumps(document()).encode())
        except StoreError:
            pass  # progress is advisory; the journal is what counts

    def _final(self, phase: str, fields: dict[str, Any]) -> Future[None]:
        # A final snapshot lists approvals (store reads): taken on the writer thread, after every
        # earlier write; the run has stopped changing by then.
        self._last = time.monotonic()
        return self._writer.submit(self._put, lambda: snapshot(self.run, phase, **fields))

    def publish(self, phase: str, **fields: Any) -> None:
        """Write a snapshot now and wait for it (for synchronous callers)."""
        self._final(phase, fields).result()

    async def apublish(self, phase: str, **fields: Any) -> None:
        """Write a snapshot without blocking the event loop."""
        await asyncio.wrap_future(self._final(phase, fields))

    def close(self) -> None:
        """Let queued writes finish in the background and end the writer thread."""
        self._writer.shutdown(wait=False)
