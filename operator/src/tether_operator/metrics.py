"""Prometheus metrics on `/metrics` (text format 0.0.4), without a client library.

Every metric, its labels and what it means are listed in operator/README.md ("Metrics"). Labels
are bounded: namespace, framework, phase, reason, mode and a few fixed sets; never a run's name.

Counters of what runs do (`RunAccount`) come from what the operator reads anyway on each look at a
run: the executor's attempts and failures, the runtime's progress record, the approval requests.
A record is read again and again; an account remembers what it has counted (per attempt) so that
each step, token and dollar is counted once. A restarted operator starts from what the run's
status shows (what the previous one had read), not from zero.

No client library: counters, gauges and histograms with labels are a hundred lines here, and the
operator image gains no dependency; the format is checked by a real Prometheus in
tests/controller/test_metrics.py.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter as _Tally
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from aiohttp import web

from tether.contract import EXIT_INTERRUPTED, EXIT_RECOVERABLE, EXIT_STORE_UNREACHABLE, Progress
from tether.stores import Store

from .times import epoch

Labels = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Labels, values: Labels, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(value: float) -> str:
    return "+Inf" if value == math.inf else f"{value:.17g}"


class _Family:
    kind = "untyped"

    def __init__(self, name: str, help: str, labels: Labels = ()) -> None:
        self.name, self.help, self.label_names = name, help, labels

    def _key(self, labels: dict[str, str]) -> Labels:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, not {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def header(self) -> str:
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n"

    def samples(self) -> Iterable[str]:
        return ()

    def render(self) -> str:
        return self.header() + "".join(self.samples())


class Counter(_Family):
    kind = "counter"

    def __init__(self, name: str, help: str, labels: Labels = ()) -> None:
        super().__init__(name, help, labels)
        self.values: dict[Labels, float] = {} if labels else {(): 0.0}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount > 0:
            key = self._key(labels)
            self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, **labels: str) -> float:
        return self.values.get(self._key(labels), 0.0)

    def zero(self, **labels: str) -> None:
        """Show the series at 0 before its first increment (rate() misses a series' first value)."""
        self.values.setdefault(self._key(labels), 0.0)

    def samples(self) -> Iterable[str]:
        for key, value in sorted(self.values.items()):
            yield f"{self.name}{_labels(self.label_names, key)} {_num(value)}\n"


class Histogram(_Family):
    kind = "histogram"

    def __init__(self, name: str, help: str, labels: Labels, buckets: tuple[float, ...]) -> None:
        super().__init__(name, help, labels)
        self.buckets = (*sorted(buckets), math.inf)
        self.series: dict[Labels, tuple[list[int], list[float]]] = {}  # bucket counts, [sum]

    def zero(self, **labels: str) -> None:
        self.series.setdefault(self._key(labels), ([0] * len(self.buckets), [0.0]))

    def observe(self, value: float, **labels: str) -> None:
        counts, total = self.series.setdefault(self._key(labels), ([0] * len(self.buckets), [0.0]))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                counts[i] += 1
        total[0] += value

    def samples(self) -> Iterable[str]:
        for key, (counts, total) in sorted(self.series.items()):
            for bound, n in zip(self.buckets, counts, strict=True):
                le = 'le="' + _num(bound) + '"'
                yield f"{self.name}_bucket{_labels(self.label_names, key, le)} {n}\n"
            yield f"{self.name}_sum{_labels(self.label_names, key)} {_num(total[0])}\n"
            yield f"{self.name}_count{_labels(self.label_names, key)} {counts[-1]}\n"


class Summary(_Family):
    """A sum and a count (no quantiles)."""

    kind = "summary"

    def __init__(self, name: str, help: str) -> None:
        super().__init__(name, help)
        self.sum, self.count = 0.0, 0

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        self.count += 1

    def samples(self) -> Iterable[str]:
        yield f"{self.name}_sum {self.sum:.6f}\n{self.name}_count {self.count}\n"


class RunPhases(_Family):
    """The gauge of AgentRuns by namespace, framework and phase: one entry per run, kept from the
    watch events (every run in the served namespaces, finished ones too)."""

    kind = "gauge"

    def __init__(self, name: str, help: str) -> None:
        super().__init__(name, help, ("namespace", "framework", "phase"))
        self.runs: dict[str, Labels] = {}

    def set(self, uid: str, namespace: str, framework: str, phase: str) -> None:
        self.runs[uid] = (namespace, framework, phase)

    def discard(self, uid: str) -> None:
        self.runs.pop(uid, None)

    def samples(self) -> Iterable[str]:
        for key, n in sorted(_Tally(self.runs.values()).items()):
            yield f"{self.name}{_labels(self.label_names, key)} {n}\n"


RUN = ("namespace", "framework")
MODE = (*RUN, "mode")

SUBMISSIONS = Counter("tether_operator_submissions_total", "Executions submitted.")
SUBMIT_SECONDS = Summary("tether_operator_submit_seconds", "Seconds spent submitting executions.")
STATUS_PATCHES = Counter("tether_operator_status_patches_total", "AgentRun status patches sent.")
RECONCILE_ERRORS = Counter(
    "tether_operator_reconcile_errors_total", "Errors a handler raised (kopf retries the object).", ("handler", "error")
)
STORE_REQUESTS = Counter("tether_operator_store_requests_total", "Requests the operator made to the store.", ("operation", "result"))
RUNS = RunPhases("tether_runs", "AgentRuns in the served namespaces, by phase.")
FINISHED = Counter(
    "tether_runs_finished_total", "AgentRuns that reached Succeeded or Failed, by the condition's reason.", (*RUN, "phase", "reason")
)
ATTEMPTS = Counter("tether_attempts_total", "Attempts started (a process, a pod, a Flyte attempt).", RUN)
RETRIES = Counter("tether_retries_total", "Attempts that failed and were run again, by why they ended.", (*RUN, "reason"))
MODEL_TURNS = Counter("tether_model_turns_total", "Model turns, called live or replayed from the journal.", MODE)
TOOL_CALLS = Counter("tether_tool_calls_total", "Tool calls, executed live or replayed from the journal.", MODE)
TOKENS = Counter("tether_tokens_total", "Tokens of model turns: live (paid) or replayed (not paid again).", MODE)
COST = Counter("tether_cost_usd_total", "US dollars of model turns: live (spent) or replayed (saved by replay).", MODE)
APPROVAL_WAIT = Histogram(
    "tether_approval_wait_seconds",
    "Seconds from an approval request to its decision.",
    (*RUN, "decision"),
    (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 14400, 86400),
)
APPLY_TO_POD = Histogram(
    "tether_apply_to_pod_seconds",
    "Seconds from an AgentRun's creation to its first attempt's start (pod created, process started).",
    (*RUN, "executor"),
    (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
KILL_TO_REPLAY = Histogram(
    "tether_kill_to_first_replay_seconds",
    "Seconds from a failed attempt's end to the next attempt's first replayed step.",
    RUN,
    (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)

FAMILIES: tuple[_Family, ...] = (
    SUBMISSIONS,
    SUBMIT_SECONDS,
    STATUS_PATCHES,
    RECONCILE_ERRORS,
    STORE_REQUESTS,
    RUNS,
    FINISHED,
    ATTEMPTS,
    RETRIES,
    MODEL_TURNS,
    TOOL_CALLS,
    TOKENS,
    COST,
    APPROVAL_WAIT,
    APPLY_TO_POD,
    KILL_TO_REPLAY,
)


RETRY_REASONS = ("Error", "Interrupted", "StoreUnreachable", "Killed", "Lost", "Crashed", "Unknown")
DECISIONS = ("approved", "declined", "timeout")


def retry_reason(exit_code: int | None) -> str:
    """Why a retried attempt ended, from its exit code (the runtime's contract): a bounded label."""
    if exit_code is None:
        return "Unknown"  # the executor does not say (Flyte retries inside its backend)
    if exit_code == EXIT_RECOVERABLE:
        return "Error"  # the runtime's transient failure: a provider, a tool or the store did not answer
    if exit_code == EXIT_STORE_UNREACHABLE:
        return "StoreUnreachable"  # the store did not answer for longer than the attempt waited (not counted against retries)
    if exit_code == EXIT_INTERRUPTED:
        return "Interrupted"  # stopped cleanly on SIGTERM/SIGINT (a pod deleted, a node drained)
    if exit_code == -1:
        return "Lost"  # executors.pods.NO_EXIT_CODE: evicted, deleted before it ran, node lost, timed out
    if exit_code < 0 or exit_code > 128:
        return "Killed"  # a signal: SIGKILL, the OOM killer (137), the local executor's timeout
    return "Crashed"


# Progress fields counted per attempt: (counter, mode, how to read it from a Progress). The live
# ones only where the runtime does not report the run's (``_PER_RUN``; an older runtime).
_PER_ATTEMPT: tuple[tuple[Counter, str, Callable[[Progress], float]], ...] = (
    (MODEL_TURNS, "live", lambda p: p.steps.model_live),
    (MODEL_TURNS, "replayed", lambda p: p.steps.model_replayed),
    (TOOL_CALLS, "live", lambda p: p.steps.tool_live),
    (TOOL_CALLS, "replayed", lambda p: p.steps.tool_replayed),
    (TOKENS, "live", lambda p: p.usage.live_tokens),
    (TOKENS, "replayed", lambda p: p.usage.replayed_tokens),
    (COST, "replayed", lambda p: p.usage.saved_usd),
)
# Live figures of the whole run (every attempt's recorded steps): counted from them, an attempt
# killed before the operator read its last progress loses nothing (the next attempt's counts it).
# (index in _PER_ATTEMPT of the per-attempt figure it replaces, how to read it, its status field).
_PER_RUN: tuple[tuple[int, Callable[[Progress], int | None], str, str], ...] = (
    (0, lambda p: p.steps.run_model_live, "steps", "runModelLive"),
    (2, lambda p: p.steps.run_tool_live, "steps", "runToolLive"),
    (4, lambda p: p.usage.run_live_tokens, "usage", "runLiveTokens"),
)


class RunAccount:
    """What one AgentRun has added to the counters, so that reading its records again adds only
    what is new. Built from the run's status: what an earlier operator process read (and counted)
    is not counted again."""

    def __init__(
        self,
        namespace: str,
        framework: str,
        executor: str,
        status: dict[str, Any],
        created: Any = None,
        retries: int = 2,
        exit_codes: bool = True,
    ) -> None:
        self.run = {"namespace": namespace, "framework": framework}
        self.executor, self.retries = executor, retries
        # An executor that runs the attempts itself lists the exit code of each attempt it ran
        # again (not deaths it found adopting the run, counted before); Flyte counts failures only.
        self.exit_codes = exit_codes
        self.codes = 0  # of that list, those counted
        self.created = epoch(created)
        self.attempts = int(status.get("attempts") or 0)
        self.retried: int | None = None  # the executor's count when first seen is the baseline
        steps, usage = status.get("steps") or {}, status.get("usage") or {}
        # The attempt whose progress status holds (at least one attempt's, if it holds any).
        self.progress_attempt = self.attempts if steps or usage else 0
        self.seen = [
            float(steps.get("modelLive", 0)),
            float(steps.get("modelReplayed", 0)),
            float(steps.get("toolLive", 0)),
            float(steps.get("toolReplayed", 0)),
            float(usage.get("liveTokens", 0)),
            float(usage.get("replayedTokens", 0)),
            float(usage.get("savedUSD", 0.0)),
        ]
        self.spent = float(usage.get("runLiveCostUSD", 0.0))  # over every attempt: what maxCostUSD counts
        # The run's live figures counted so far; None: status holds progress without them (an
        # older runtime's): the first reading is the baseline (what it holds was counted).
        shown = {"steps": steps, "usage": usage}
        self.run_seen: list[float | None] = [
            float(shown[part][name]) if name in shown[part] else (None if self.progress_attempt else 0.0) for _, _, part, name in _PER_RUN
        ]
        self.decided = {a.get("id") for a in status.get("approvals") or [] if a.get("decision")}
        self.died: tuple[int, float] | None = None  # (the attempt, when it was seen to end)
        self.finished = False
        self._zero()

    def _zero(self) -> None:
        """The run's namespace and framework's series at 0 from the start: a first increment is a
        change rate() and increase() see (a series that appears at 1 shows no increase)."""
        ATTEMPTS.zero(**self.run)
        FINISHED.zero(**self.run, phase="Succeeded", reason="Succeeded")
        for reason in RETRY_REASONS:
            RETRIES.zero(**self.run, reason=reason)
        for counter, mode, _ in _PER_ATTEMPT:
            counter.zero(**self.run, mode=mode)
        COST.zero(**self.run, mode="live")
        for decision in DECISIONS:
            APPROVAL_WAIT.zero(**self.run, decision=decision)
        APPLY_TO_POD.zero(**self.run, executor=self.executor)
        KILL_TO_REPLAY.zero(**self.run)

    def execution(self, attempts: int, failures: int, retried_codes: Sequence[int], queued: bool) -> None:
        """The executor's counts: attempts started, failures and the exit codes of the attempts
        it ran again (`queued`: the next attempt has not started yet). The failure that exhausts
        the retries was not retried."""
        if attempts > self.attempts:
            if self.attempts == 0 and self.created is not None:
                APPLY_TO_POD.observe(max(0.0, time.time() - self.created), **self.run, executor=self.executor)
            ATTEMPTS.inc(attempts - self.attempts, **self.run)
            self.attempts = attempts
        if self.exit_codes:
            fresh = len(retried_codes) - self.codes
            for code in retried_codes[self.codes :]:
                RETRIES.inc(1.0, **self.run, reason=retry_reason(code))
            self.codes = len(retried_codes)
        else:
            retried = min(failures, self.retries)
            fresh = 0 if self.retried is None else max(0, retried - self.retried)  # the first look: counted before
            self.retried = max(retried, self.retried or 0)
            RETRIES.inc(fresh, **self.run, reason=retry_reason(None))
        if fresh > 0:
            self.died = (attempts if queued else attempts - 1, time.time())

    def progress(self, progress: Progress) -> None:
        """The runtime's progress record: count what it shows beyond what was counted."""
        if progress.attempt < self.progress_attempt:
            return  # an earlier attempt's record: counted when it was current
        if progress.attempt > self.progress_attempt:
            self.progress_attempt, self.seen = progress.attempt, [0.0] * len(self.seen)
        by_run: dict[int, tuple[int, float]] = {}
        for j, (i, read_run, _, _) in enumerate(_PER_RUN):
            reported = read_run(progress)
            if reported is not None:
                by_run[i] = (j, float(reported))
        for i, (counter, mode, read) in enumerate(_PER_ATTEMPT):
            value = float(read(progress))
            if i in by_run:
                j, total = by_run[i]
                counted = self.run_seen[j]
                if counted is not None and total > counted:
                    counter.inc(total - counted, **self.run, mode=mode)
                self.run_seen[j] = max(total, counted or 0.0)
            elif value > self.seen[i]:
                counter.inc(value - self.seen[i], **self.run, mode=mode)
            self.seen[i] = max(value, self.seen[i])
        spent = progress.usage.run_live_cost_usd
        if spent > self.spent:
            COST.inc(spent - self.spent, **self.run, mode="live")
            self.spent = spent
        first = epoch(progress.first_replay_at)
        if self.died is not None and progress.attempt > self.died[0] and first is not None:
            KILL_TO_REPLAY.observe(max(0.0, first - self.died[1]), **self.run)
            self.died = None

    def approvals(self, requests: Iterable[dict[str, Any]]) -> None:
        """Approval requests with their decisions: each decided one observed once."""
        for r in requests:
            decision = r.get("decision") or {}
            if not decision or r.get("id") in self.decided:
                continue
            self.decided.add(r.get("id"))
            asked, decided = epoch(r.get("requestedAt")), epoch(decision.get("decided_at") or decision.get("decidedAt"))
            if asked is None or decided is None:
                continue
            verdict = "timeout" if decision.get("by") == "timeout" else "approved" if decision.get("approved") else "declined"
            APPROVAL_WAIT.observe(max(0.0, decided - asked), **self.run, decision=verdict)

    def finish(self, phase: str, reason: str) -> None:
        """The run's terminal status was written: counted once per operator process."""
        if not self.finished:
            self.finished = True
            FINISHED.inc(1.0, **self.run, phase=phase, reason=reason or phase)


class CountedStore(Store):
    """A store whose requests are counted by operation and result."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.url = inner, inner.url

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            result = fn(*args)
        except Exception:
            STORE_REQUESTS.inc(operation=operation, result="error")
            raise
        STORE_REQUESTS.inc(operation=operation, result="ok")
        return result

    def get(self, key: str) -> bytes | None:
        return self._call("get", self.inner.get, key)  # type: ignore[no-any-return]

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        return self._call("get", self.inner.get_versioned, key)  # type: ignore[no-any-return]

    def put(self, key: str, data: bytes) -> None:
        self._call("put", self.inner.put, key, data)

    def create(self, key: str, data: bytes) -> bool:
        return self._call("create", self.inner.create, key, data)  # type: ignore[no-any-return]

    def replace(self, key: str, data: bytes, version: str) -> bool:
        return self._call("replace", self.inner.replace, key, data, version)  # type: ignore[no-any-return]

    def write_if(self, key: str, data: bytes, version: str | None) -> str | None:
        return self._call("replace", self.inner.write_if, key, data, version)  # type: ignore[no-any-return]

    def list(self, prefix: str) -> list[str]:
        return self._call("list", self.inner.list, prefix)  # type: ignore[no-any-return]

    def delete(self, key: str) -> None:
        self._call("delete", self.inner.delete, key)

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        return self._call("get", self.inner.get_many, list(keys))  # type: ignore[no-any-return]


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def counting_errors(handler: str) -> Callable[[F], F]:
    """Count what a kopf handler raises (kopf logs it and retries the object), by exception class."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:
                RECONCILE_ERRORS.inc(handler=handler, error=type(exc).__name__)
                raise

        return counted  # type: ignore[return-value]

    return wrap


def render(states: Callable[[], list[str]] | None = None) -> str:
    text = "".join(m.render() for m in FAMILIES)
    if states is not None:
        text += "# HELP tether_operator_executions Executions held by the executor, by state.\n# TYPE tether_operator_executions gauge\n"
        for state, n in sorted(_Tally(states()).items()):
            text += f'tether_operator_executions{{state="{state}"}} {n}\n'
    return text


async def serve(port: int, executor: Any) -> web.AppRunner:
    """Start the endpoint; the caller keeps the runner and cleans it up on shutdown."""

    def states() -> list[str]:
        return [st.state.value for st in executor.executions()]

    async def handle(_: web.Request) -> web.Response:
        return web.Response(text=render(states), content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner
