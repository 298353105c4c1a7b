"""Progress of a run, published to the store for executors, the operator and ``tether status``.

``runs/<scope>/progress.json`` is rewritten atomically on every step (at most every
``interval`` seconds, and always at the end). Keys are camelCase: the operator mirrors them into
the AgentRun status as they are. Secrets never reach it: it holds counters, usage, approvals and
the (truncated) result only.
"""

from __future__ import annotations

import json
import threading
import time
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
            "unknownCostTurns": a.unknown_cost_live,
            "unknownSavedTurns": a.unknown_cost_replayed,
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


def unknown_cost_note(usage: dict[str, Any]) -> str:
    """What the summary adds when some turns' cost is unknown: the figures are lower bounds."""
    live, saved = usage.get("unknownCostTurns", 0), usage.get("unknownSavedTurns", 0)
    parts = [f"{n} {what} turn(s) of unknown cost" for n, what in ((live, "live"), (saved, "replayed")) if n]
    return f" (at least: {', '.join(parts)})" if parts else ""


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
                self.run.store.put(progress_key(self.run.scope), json.dumps(snapshot(self.run, phase, **fields)).encode())
            except StoreError:
                pass  # progress is advisory; the journal is what counts
