"""The tool seam (README.md, "How it works": Tool seam): a completed call never runs twice within a run scope.

Each attempt is a fresh :class:`~tether.run.Run` of the scope (journal loaded again, next attempt
number). Tools count their own executions, so "did not run" is observed, not inferred.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from tether.errors import ToolError
from tether.journal import Record, read_records
from tether.run import Run
from tether.stores import LocalStore, open_store
from tether.tools import ToolSpec, call_tool, call_tool_sync, idempotency_key


class Counted:
    """A sync or async tool that counts its executions and can fail on demand."""

    def __init__(self, kind: str, result=None, raises: BaseException | None = None, delay: float = 0.0) -> None:
        self.kind, self.result, self.raises, self.delay = kind, result, raises, delay
        self.calls: list[dict] = []
        self.keys: list[str | None] = []
        self._lock = threading.Lock()
        self.fn = self._async if kind == "async" else self._sync

    def _body(self, **args):
        with self._lock:
            self.calls.append(args)
            self.keys.append(idempotency_key())
        if self.raises is not None:
            raise self.raises
        return self.result if self.result is not None else {"echo": args, "n": len(self.calls)}

    def _sync(self, **args):
        if self.delay:
            import time

            time.sleep(self.delay)
        return self._body(**args)

    async def _async(self, **args):
        if self.delay:
            await asyncio.sleep(self.delay)
        return self._body(**args)


def tool_records(store, scope: str) -> list[Record]:
    return [r for r in read_records(open_store(store), scope) if r.kind == "tool"]


KINDS = ["sync", "async"]


@pytest.mark.parametrize("kind", KINDS)
async def test_replay_returns_the_recorded_result_without_running(store_url, kind):
    tool = Counted(kind)
    spec = ToolSpec("echo", tool.fn)
    run = Run("t", store_url)
    live = await call_tool(spec, {"city": "Paris", "days": (1, 2)}, run=run)
    assert live == {"echo": {"city": "Paris", "days": [1, 2]}, "n": 1}  # as it went through JSON
    assert (run.counters.tool_live, run.counters.tool_replayed) == (1, 0)
    assert run.events[-1].replayed is False and run.events[-1].kind == "tool"

    run = Run("t", store_url)
    replayed = await call_tool(spec, {"days": [1, 2], "city": "Paris"}, run=run)  # same arguments, other order
    assert replayed == live
    assert len(tool.calls) == 1, "a recorded tool ran again"
    assert (run.counters.tool_live, run.counters.tool_replayed) == (0, 1)
    assert run.events[-1].replayed is True
    [record] = tool_records(store_url, "t")
    assert record.outcome == "ok" and record.attempt == 1 and record.request["tool"] == "echo"


@pytest.mark.parametrize("kind", KINDS)
async def test_terminal_error_is_recorded_and_raised_again_without_running(tmp_path, kind):
    tool = Counted(kind, raises=ValueError("no such city: Atlantis"))
    spec = ToolSpec("weather", tool.fn)
    errors = []
    for attempt in (1, 2):
        run = Run("e", tmp_path)
        with pytest.raises(ToolError) as failed:
            await call_tool(spec, {"city": "Atlantis"}, run=run)
        errors.append((failed.value.tool, failed.value.error_type, failed.value.message))
        assert run.events[-1].outcome == "error" and run.events[-1].replayed is (attempt == 2)
    assert errors[0] == errors[1] == ("weather", "ValueError", "no such city: Atlantis")
    assert len(tool.calls) == 1, "a recorded terminal error ran again"
    [record] = tool_records(tmp_path, "e")
    assert record.outcome == "error"


@pytest.mark.parametrize("kind", KINDS)
async def test_retryable_exception_is_not_recorded_and_runs_again(tmp_path, kind):
    tool = Counted(kind, raises=TimeoutError("upstream busy"))
    spec = ToolSpec("book", tool.fn, retryable=(TimeoutError,))
    run = Run("r", tmp_path)
    with pytest.raises(TimeoutError):  # the exception itself, not a ToolError
        await call_tool(spec, {"room": "12"}, run=run)
    assert tool_records(tmp_path, "r") == []

    tool.raises = None
    run = Run("r", tmp_path)
    assert await call_tool(spec, {"room": "12"}, run=run) == {"echo": {"room": "12"}, "n": 2}
    assert len(tool.calls) == 2
    [record] = tool_records(tmp_path, "r")
    assert record.attempt == 2

    run = Run("r", tmp_path)
    await call_tool(spec, {"room": "12"}, run=run)
    assert len(tool.calls) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_idempotency_key_is_stable_across_attempts_and_differs_between_occurrences(tmp_path, kind):
    tool = Counted(kind, raises=ConnectionError("refund API timed out after sending"))
    spec = ToolSpec("refund", tool.fn, retryable=(ConnectionError,))
    assert idempotency_key() is None  # only inside a tool step

    async def attempt(scope: str) -> None:
        run = Run(scope, tmp_path)
        for _ in range(2):  # a failed call and the framework's retry of it: the same step, the same key
            with pytest.raises(ConnectionError):
                await call_tool(spec, {"order": "A-1"}, run=run)
        with pytest.raises(ConnectionError):
            await call_tool(spec, {"order": "B-2"}, run=run)

    await attempt("k")
    first = list(tool.keys)
    await attempt("k")
    second = tool.keys[3:]
    assert all(isinstance(k, str) and len(k) == 32 for k in first)
    assert second == first, "the same step got another idempotency key on the retry"
    assert first[0] == first[1], "the retry of a call that failed unrecorded got another key"
    assert len(set(first)) == 2, "other arguments share a key"
    await attempt("other-scope")
    assert not set(tool.keys[6:]) & set(first), "another run scope reuses keys"

    # Identical calls that both complete are two steps: occurrences 1 and 2, two keys.
    tool.raises = None
    run = Run("twice", tmp_path)
    await call_tool(spec, {"order": "C-3"}, run=run)
    await call_tool(spec, {"order": "C-3"}, run=run)
    assert tool.keys[-1] != tool.keys[-2]
    assert sorted(r.occurrence for r in tool_records(tmp_path, "twice")) == [1, 2]
    assert idempotency_key() is None


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retried_tool_error_does_not_shift_keys(tmp_path, kind):
    """A call fails with a retryable error (not recorded), the framework calls it again and it
    succeeds: the next attempt must replay that success, not run the refund a second time."""
    tool = Counted(kind, raises=ConnectionError("refund API busy"))
    spec = ToolSpec("refund", tool.fn, retryable=(ConnectionError,))
    run = Run("shift", tmp_path)
    with pytest.raises(ConnectionError):
        await call_tool(spec, {"order": "A-1"}, run=run)
    tool.raises = None
    done = await call_tool(spec, {"order": "A-1"}, run=run)  # the framework's retry
    assert len(tool.calls) == 2

    retry = Run("shift", tmp_path)
    assert await call_tool(spec, {"order": "A-1"}, run=retry) == done
    assert len(tool.calls) == 2, "the refund ran again after a retried error shifted its key"
    assert (retry.counters.tool_live, retry.counters.tool_replayed) == (0, 1)


async def test_cache_auto_reuses_results_across_runs_and_forgets_them_when_the_code_changes(store_url):
    executions = []

    def convert_v1(amount: float) -> dict:
        executions.append(("v1", amount))
        return {"eur": round(amount * 0.9, 2)}

    def convert_v2(amount: float) -> dict:
        executions.append(("v2", amount))
        return {"eur": round(amount * 0.92, 2)}

    v1 = ToolSpec("convert", convert_v1, cache="auto")
    assert await call_tool(v1, {"amount": 10}, run=Run("run-a", store_url)) == {"eur": 9.0}
    run_b = Run("run-b", store_url)
    assert await call_tool(v1, {"amount": 10}, run=run_b) == {"eur": 9.0}
    assert executions == [("v1", 10)], "cache=auto ran the tool again in another run"
    assert run_b.events[-1].replayed is True
    assert run_b.events[-1].mode == "cached", "a result from another run's cache is shown as cached, not replayed"
    [record] = tool_records(store_url, "run-b")  # the cached result is part of run-b's journal now
    assert record.outcome == "ok"
    retry_b = Run("run-b", store_url)  # run-b's own journal now: a replay
    assert await call_tool(v1, {"amount": 10}, run=retry_b) == {"eur": 9.0}
    assert retry_b.events[-1].mode == "replayed"
    await call_tool(v1, {"amount": 20}, run=Run("run-c", store_url))  # other arguments: a miss
    assert executions[-1] == ("v1", 20)

    v2 = ToolSpec("convert", convert_v2, cache="auto")  # same name, changed code
    assert v2.code != v1.code
    assert await call_tool(v2, {"amount": 10}, run=Run("run-d", store_url)) == {"eur": 9.2}
    assert executions[-1] == ("v2", 10)

    off = ToolSpec("convert", convert_v1)  # the default: reuse within a run only
    await call_tool(off, {"amount": 10}, run=Run("run-e", store_url))
    assert executions[-1] == ("v1", 10) and len(executions) == 4


async def test_cache_auto_never_reuses_an_error(tmp_path):
    tool = Counted("sync", raises=RuntimeError("disk full"))
    spec = ToolSpec("save", tool.fn, cache="auto")
    for scope in ("a", "b"):
        with pytest.raises(ToolError):
            await call_tool(spec, {"doc": "x"}, run=Run(scope, tmp_path))
    assert len(tool.calls) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_concurrent_identical_calls_are_occurrences_1_and_2(tmp_path, kind):
    tool = Counted(kind, delay=0.05)
    spec = ToolSpec("search", tool.fn)
    run = Run("c", tmp_path)
    results = await asyncio.gather(*(call_tool(spec, {"q": "tether"}, run=run) for _ in range(2)))
    assert len(tool.calls) == 2 and len(set(tool.keys)) == 2
    records = tool_records(tmp_path, "c")
    assert sorted(r.occurrence for r in records) == [1, 2] and len({r.fingerprint for r in records}) == 1

    run = Run("c", tmp_path)
    again = await asyncio.gather(*(call_tool(spec, {"q": "tether"}, run=run) for _ in range(2)))
    assert len(tool.calls) == 2 and run.counters.tool_replayed == 2
    assert sorted(map(str, again)) == sorted(map(str, results))
    # A third identical call in a retry is a new step: it runs.
    await call_tool(spec, {"q": "tether"}, run=run)
    assert len(tool.calls) == 3


def test_call_tool_sync_records_and_replays(tmp_path):
    tool = Counted("sync")
    spec = ToolSpec("lookup", tool.fn)
    with Run("s", tmp_path).activate():  # found through the current run
        assert call_tool_sync(spec, {"topic": "x"}) == {"echo": {"topic": "x"}, "n": 1}
    with Run("s", tmp_path).activate() as run:
        assert call_tool_sync(spec, {"topic": "x"}) == {"echo": {"topic": "x"}, "n": 1}
    assert len(tool.calls) == 1 and run.counters.tool_replayed == 1


async def test_without_a_run_the_tool_just_runs(tmp_path):
    tool = Counted("async")
    spec = ToolSpec("plain", tool.fn)
    await call_tool(spec, {"a": 1})
    await call_tool(spec, {"a": 1})
    assert len(tool.calls) == 2 and tool.keys == [None, None]


def _default_executor_threads() -> int:
    import os

    return min(32, (os.cpu_count() or 1) + 4)  # what asyncio.to_thread would have


@pytest.mark.parametrize("through", ["seam", "tool"])
async def test_parallel_sync_calls_all_run_at_once(tmp_path, through):
    """More parallel sync calls than the event loop's default executor has threads each wait
    until all have started: they can only finish if every one has a thread of its own."""
    from tether import Tool

    n = _default_executor_threads() + 2
    everyone = threading.Barrier(n, timeout=20)

    def meet(i: int) -> int:
        everyone.wait()
        return i

    run = Run("parallel-sync", tmp_path)
    with run.activate():
        if through == "seam":
            calls = [call_tool(ToolSpec("meet", meet), {"i": i}) for i in range(n)]
        else:
            tool = Tool(meet)
            calls = [tool(i=i) for i in range(n)]
        assert await asyncio.gather(*calls) == list(range(n))
    assert run.counters.tool_live == n and not everyone.broken


def test_parallel_identical_calls_from_threads_take_distinct_occurrences(tmp_path):
    """A sync framework calling one tool with the same arguments from several threads at once:
    each call gets its own occurrence (and idempotency key); a retry replays every one."""
    n = 6
    everyone = threading.Barrier(n, timeout=20)
    tool = Counted("sync")

    def meet(**args):
        everyone.wait()
        return tool.fn(**args)

    spec = ToolSpec("meet", meet)

    def attempt() -> Run:
        run = Run("threads", tmp_path)
        threads = [threading.Thread(target=call_tool_sync, args=(spec, {"q": "same"}), kwargs={"run": run}) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return run

    run = attempt()
    assert len(tool.calls) == n and len(set(tool.keys)) == n
    assert sorted(r.occurrence for r in tool_records(tmp_path, "threads")) == list(range(1, n + 1))
    assert [e.index for e in run.events] == list(range(1, n + 1))
    everyone.reset()
    run = attempt()
    assert run.counters.tool_replayed == n and len(tool.calls) == n


async def test_a_retry_replays_the_parallel_call_that_finished_whatever_the_order(tmp_path):
    """Two identical parallel calls; the one that arrived second finishes, the first never does
    (the process dies). The retry runs one call and replays the other: keys follow arrival, and
    identical calls are interchangeable, so the order they finish in changes nothing."""
    started: list[int] = []
    release_first = asyncio.Event()
    hangs: list[asyncio.Task[Any]] = []

    async def work(q: str) -> str:
        started.append(len(started) + 1)
        # The call that arrived first hangs until cancelled, whichever reaches the tool first (the
        # journal's round trips run in threads, so the two may swap places on the way).
        if asyncio.current_task() in hangs and not release_first.is_set():
            await asyncio.Event().wait()
        return f"done {q}"

    spec = ToolSpec("work", work)
    run = Run("order", tmp_path)
    first = asyncio.ensure_future(call_tool(spec, {"q": "x"}, run=run))
    second = asyncio.ensure_future(call_tool(spec, {"q": "x"}, run=run))
    hangs.append(first)
    assert await second == "done x"
    first.cancel()  # the attempt dies with the first call unfinished
    with pytest.raises(asyncio.CancelledError):
        await first
    assert [r.occurrence for r in tool_records(tmp_path, "order")] == [2]

    release_first.set()
    retry = Run("order", tmp_path)
    assert await asyncio.gather(*(call_tool(spec, {"q": "x"}, run=retry) for _ in range(2))) == ["done x", "done x"]
    assert retry.counters.tool_replayed == 1 and retry.counters.tool_live == 1 and len(started) == 3


async def test_a_call_that_suspends_for_approval_lets_parallel_calls_finish_first(tmp_path):
    """A turn's parallel calls: one needs an approval, the other is still running when the run
    suspends. The running one finishes and is recorded before the run suspends, so after the
    decision it replays instead of running again."""
    from tether.approvals import decide, list_approvals
    from tether.errors import Suspended

    store = open_store(tmp_path)
    refund, slow_runs = Counted("async"), []

    async def slow(x: str) -> str:
        slow_runs.append(x)
        deadline = asyncio.get_running_loop().time() + 20
        while not store.list("approvals/par-approval/") and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # still running when the other call asks for its approval
        return "slow done"

    specs = (ToolSpec("refund", refund.fn, approval=True), ToolSpec("slow", slow))
    run = Run("par-approval", tmp_path)
    with pytest.raises(Suspended):
        await asyncio.gather(call_tool(specs[0], {"order": "A1"}, run=run), call_tool(specs[1], {"x": "1"}, run=run))
    assert [r.request["tool"] for r in tool_records(tmp_path, "par-approval")] == ["slow"]

    [request] = list_approvals(store, "par-approval")
    decide(store, "par-approval", request["id"], True, by="test")
    retry = Run("par-approval", tmp_path)
    results = await asyncio.gather(call_tool(specs[0], {"order": "A1"}, run=retry), call_tool(specs[1], {"x": "1"}, run=retry))
    assert results[1] == "slow done" and len(refund.calls) == 1 and slow_runs == ["1"]
    assert retry.counters.tool_replayed == 1 and retry.counters.tool_live == 1


async def test_a_call_still_beginning_when_another_suspends_the_run_is_waited_for(tmp_path):
    """The same with the parallel call still being announced (a slow disk) when the other asks for
    its approval: a call counts as running from the moment it may run live, so the suspension waits
    for it and it is recorded before the run suspends, not left running on after the attempt."""
    from tether.errors import Suspended

    refund, slow_runs = Counted("async"), []

    async def slow(x: str) -> str:
        slow_runs.append(x)
        return "slow done"

    run = Run("beginning", _SlowAnnouncements(tmp_path))
    with pytest.raises(Suspended):
        await asyncio.gather(
            call_tool(ToolSpec("refund", refund.fn, approval=True), {"order": "A1"}, run=run),
            call_tool(ToolSpec("slow", slow), {"x": "1"}, run=run),
        )
    assert [r.request["tool"] for r in tool_records(tmp_path, "beginning")] == ["slow"] and slow_runs == ["1"]
    assert refund.calls == [] and run.tools_running == set()


async def test_progress_catches_up_with_a_step_inside_its_interval(tmp_path):
    """Progress is published at most every interval; a step inside it is published at the
    interval's end, not only with a next step that may never come (a process killed then showed
    its last step missing for good: `tether run`'s summary lagged the journal)."""
    from tether.progress import ProgressWriter, read_progress

    run = Run("lag", tmp_path)
    writer = ProgressWriter(run, interval=0.3)
    spec = ToolSpec("echo", lambda text: text)
    for text in ("one", "two"):  # the second step lands inside the interval the first one opened
        await call_tool(spec, {"text": text}, run=run)
    await asyncio.sleep(1.0)  # no further step, no final publish: as if the process had been killed now
    progress = read_progress(run.store, "lag")
    assert progress is not None and progress["steps"]["toolLive"] == 2, progress
    writer.close()


async def test_a_step_reported_after_progress_closed_changes_nothing_and_raises_nowhere(tmp_path):
    """A late step (a thread still finishing after the attempt ended) once started a timer whose
    publish hit the closed writer: "cannot schedule new futures after shutdown" in a thread."""
    from tether.progress import ProgressWriter, read_progress

    run = Run("late", tmp_path)
    writer = ProgressWriter(run, interval=0.2)
    spec = ToolSpec("echo", lambda text: text)
    await call_tool(spec, {"text": "one"}, run=run)
    writer.publish("Succeeded")
    writer.close()
    failed: list[BaseException] = []
    previous, threading.excepthook = threading.excepthook, lambda args: failed.append(args.exc_value)
    try:
        await call_tool(spec, {"text": "two"}, run=run)  # inside the interval: would start a timer
        await asyncio.sleep(0.5)
    finally:
        threading.excepthook = previous
    assert failed == []
    progress = read_progress(run.store, "late")
    assert progress is not None and progress["phase"] == "Succeeded" and progress["steps"]["toolLive"] == 1, progress


class _SlowAnnouncements(LocalStore):
    """A local store whose announcements of live calls take a while (a slow disk), made in a
    thread as on a remote store (a local one's are made on the loop: ``Attempt.begins_at_once``)."""

    local = False

    def put(self, key: str, data: bytes) -> None:
        if "/running/" in key:
            time.sleep(0.4)
        super().put(key, data)


async def test_a_call_cancelled_while_it_is_announced_leaves_no_announcement_behind(tmp_path):
    """The framework drops a call (its run suspends, its task group is cancelled) while the call
    is being announced in a thread: the thread still finishes, and the announcement it made must
    end, or it is rewritten as long as the process lives and the run's next attempt in this
    process waits for that call for good (a pydantic-ai suite run hung so)."""
    runs: list[str] = []

    async def work(q: str) -> str:
        runs.append(q)
        return f"done {q}"

    spec = ToolSpec("work", work)
    run = Run("dropped", _SlowAnnouncements(tmp_path))
    call = asyncio.ensure_future(call_tool(spec, {"q": "x"}, run=run))
    await asyncio.sleep(0.1)  # announcing, in its thread
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await run.aclose()  # the attempt ends before the announcement is even written
    await asyncio.sleep(0.6)
    assert open_store(tmp_path).list("journal/dropped/running/") == [] and runs == []
    retry = Run("dropped", tmp_path)
    assert await asyncio.wait_for(call_tool(spec, {"q": "x"}, run=retry), 15) == "done x"
    assert runs == ["x"] and retry.counters.tool_live == 1
    await retry.aclose()
