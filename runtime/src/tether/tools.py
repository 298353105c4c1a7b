"""The tool seam: every tool call of every adapter goes through :func:`call_tool` (README.md, "How it works": Tool seam).

    journal hit, ok      → the recorded result (the tool does not run)
    journal hit, error   → the recorded error, raised again as ToolError
    cache hit (auto)     → the cached result, also written to this run's journal (never for a tool
                           that requires approval, unless it opted in with cached_without_approval)
    otherwise            → run the tool, record, return

A completed call never runs twice within a run scope, whatever its cache setting. Exceptions a
tool declares ``retryable`` are not recorded: the next attempt runs the call again; a call that
ends unrecorded gives its occurrence back (``Journal.claim``/``release``), so the framework's
retry of it has the same key and idempotency key, and later calls' keys never shift. Live and
replayed calls return the same value: the result as it went through JSON, so what the framework
sees — and so every later fingerprint — is identical across attempts.

Parallel calls (a turn asking for several tools) run in parallel, each keyed on arrival by its
tool and arguments, never by the order they finish in: a kill between them leaves exactly the
finished ones recorded. A call that suspends the run for an approval first waits for its running
siblings, so they are recorded rather than cut off.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .approvals import require_approval
from .attempt import Attempt, current_attempt
from .canonical import canonical_json, fingerprint, sha256_hex
from .contract import AGENT_MODULES_ENV as AGENT_MODULES_ENV  # the operator sets them (tether.contract)
from .contract import LOCAL_RUN_ENV, tool_cache_prefix
from .contract import TOOL_MODULES_ENV as TOOL_MODULES_ENV
from .errors import ConfigError, Interrupted, StoreError, Superseded, Suspended, ToolError, ToolRunnerUnavailable
from .journal import Record, StepKey
from .secrets import tool_scope
from .stores.outage import patiently

_T = TypeVar("_T")

_idempotency_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("tether_idempotency_key", default=None)


class ToolFailed(Exception):
    """A tool that ran elsewhere (a tool runner) raised ``error_type``: recorded as that type,
    exactly as the same failure in this process would be."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def idempotency_key() -> str | None:
    """The current tool step's idempotency key, deterministic across attempts.

    Hand it to an external API (``Idempotency-Key`` header) so a side effect that happened just
    before a crash — after the call, before its record — is not repeated by the retry.
    """
    return _idempotency_key.get()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):  # pydantic models
        return value.model_dump(mode="json")
    if hasattr(value, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def encode_result(value: Any) -> bytes:
    return json.dumps(value, default=_jsonable, sort_keys=True, ensure_ascii=False).encode()


def code_hash(fn: Callable[..., Any]) -> str:
    """Hash of a tool's source (its bytecode if the source is unavailable): the cache key part
    that makes ``cache="auto"`` forget results when the tool's code changes."""
    try:
        text = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        text = getattr(getattr(fn, "__code__", None), "co_code", b"") or repr(fn).encode()
    return hashlib.sha256(text).hexdigest()[:16]


@dataclass
class ToolSpec:
    """What the seam needs to know about a tool."""

    name: str
    fn: Callable[..., Any]
    version: str = ""
    #: ``"auto"`` reuses results across runs (key: name + code hash + arguments); ``"off"`` only within a run.
    cache: str = "off"
    #: Exceptions that mean "try again later": not recorded, so the next attempt re-runs the call.
    retryable: tuple[type[BaseException], ...] = ()
    #: ``None``, or a callable/str describing the approval request (see ``tether.approvals``).
    approval: Any = None
    code: str = field(default="")
    #: The tool's own secrets (its AgentTool's ``env``): visible only during its calls (``tether.secrets``).
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: With ``approval`` and ``cache="auto"``: return a result cached by an earlier run without
    #: asking anyone. Off unless said explicitly; every new call needs a decision otherwise.
    cached_without_approval: bool = False

    def __post_init__(self) -> None:
        if not self.code:
            self.code = code_hash(self.fn)
        if self.cache == "auto" and self.approval is not None and not self.cached_without_approval:
            raise ConfigError(
                f"tool {self.name}: cache='auto' would return results cached by earlier runs without asking for approval; "
                "use cache='off', or cached_without_approval=True to allow it"
            )

    @property
    def reuses_cached(self) -> bool:
        """Whether a result cached by an earlier run may stand in for a call."""
        return self.cache == "auto" and (self.approval is None or self.cached_without_approval)


def _step(spec: ToolSpec, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    try:
        canonical = {"tool": spec.name, "version": spec.version, "arguments": json.loads(canonical_json(args))}
    except (TypeError, ValueError):
        canonical = {"tool": spec.name, "version": spec.version, "arguments": json.loads(encode_result(args))}
    return canonical, fingerprint("tool", canonical)


def _cache_key(spec: ToolSpec, canonical: dict[str, Any]) -> str:
    return f"{tool_cache_prefix()}{spec.name}/{spec.code}/{sha256_hex(canonical_json(canonical['arguments']))}.rec"


def _from_record(spec: ToolSpec, record: Record) -> Any:
    payload = json.loads(record.body)
    if record.outcome == "error":
        raise ToolError(spec.name, payload["type"], payload["message"])
    return payload


async def call_tool(spec: ToolSpec, args: dict[str, Any], *, run: Attempt | None = None) -> Any:
    """Call a tool through the journal. Async tools run on the caller's loop, sync tools in a
    thread each (:func:`in_tool_thread`): calls the framework makes in parallel run in parallel."""
    run = run or current_attempt()
    if run is None:
        with tool_scope(spec.secrets):
            return await _invoke(spec, args)
    canonical, fp = _step(spec, args)
    record, key = run.claim("tool", fp)
    if record is not None:
        run.account_tool(spec.name, replayed=True, outcome=record.outcome, key=key, record=record)
        return _from_record(spec, record)
    # From here the call may run live: it counts among the attempt's running calls, so a parallel
    # call that suspends the run for an approval waits for it (a call registered only once it had
    # begun was missed while it began, and ran on after the suspension: 1 suite run in 25).
    done = asyncio.get_running_loop().create_future()
    run.tools_running.add(done)
    try:
        return await _call_uncached(run, spec, args, canonical, fp, key, done)
    finally:
        _ended(run, done)


def _ended(run: Attempt, done: asyncio.Future[None]) -> None:
    """A call no longer running (or suspending the run: two that both ask for an approval would
    otherwise wait for each other)."""
    run.tools_running.discard(done)
    if not done.done():
        done.set_result(None)


async def _call_uncached(
    run: Attempt, spec: ToolSpec, args: dict[str, Any], canonical: dict[str, Any], fp: str, key: StepKey, done: asyncio.Future[None]
) -> Any:
    # The turn that asked for this call is durable before the call does anything (its record is
    # written while the framework reads it: tether.wire.seam), or a kill in between would let a
    # retry that asks the model again run a different call.
    await run.answers_recorded()
    if (
        spec.reuses_cached
        and (cached := await asyncio.to_thread(patiently, lambda: _cached(run, spec, canonical), "the tool cache")) is not None
    ):
        cached.fingerprint, cached.occurrence = fp, key[2]
        cached.response = {**cached.response, "cached": True}  # ran in another run: not this run's live call
        await asyncio.to_thread(functools.partial(run.record, cached, replayed=True))
        run.account_tool(spec.name, replayed=True, outcome=cached.outcome, cached=True, key=key, record=cached)
        return _from_record(spec, cached)
    if run.stopping:
        raise Interrupted(run.stopping)  # a stopping attempt starts no new live call
    try:
        begin = functools.partial(_begin_live, run, key, spec.approval is None)
        if run.begins_at_once:  # nothing to wait for: no thread hop (~0.1 ms a call, benchmarks/mcp_overhead.py)
            older, announced = begin()
        else:
            older, announced = await _in_thread(begin, lambda begun: _withdraw(run, key, begun[1]))
        if older is not None:  # an older attempt was running this call when this one started: its record
            run.account_tool(spec.name, replayed=True, outcome=older.outcome, key=key, record=older)
            return _from_record(spec, older)
        if spec.approval is not None:
            try:
                # Safe to repeat: a request that landed but whose answer was lost is found, under its id.
                asking = functools.partial(require_approval, run, spec.name, spec.approval, key, canonical["arguments"])
                decision = await asyncio.to_thread(patiently, asking, "an approval request")
            except Suspended:
                _ended(run, done)
                await _running_calls_done(run)  # parallel calls already running finish and are recorded first
                raise
            if not decision.approved:
                return decision.refusal(spec.name)
            announced = await _in_thread(functools.partial(run.announce, key), lambda end: _withdraw(run, key, end))
    except Superseded as e:
        run.release(key)
        raise Interrupted(str(e)) from None  # a newer attempt has started: it runs the call (tether.fence)
    assert announced is not None

    enclosing = _enclosing_calls.set((*_enclosing_calls.get(), done))
    try:
        return await _call_live(run, spec, args, canonical, key)
    finally:
        announced()
        run.release(key)  # a call that ended unrecorded (retryable error, cancelled): its number is free again
        _enclosing_calls.reset(enclosing)


async def _in_thread(fn: Callable[[], _T], undo: Callable[[_T], None]) -> _T:
    """``fn()`` in a thread. A caller cancelled meanwhile (its attempt ends, or the framework drops
    the call) does not stop the thread: ``undo`` gets what it did once it is done. An announcement
    nobody ended would be rewritten for as long as its process lives, and a later attempt in that
    process would wait for the call for good."""
    done = asyncio.ensure_future(asyncio.to_thread(fn))
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        done.add_done_callback(lambda f: None if f.cancelled() or f.exception() is not None else undo(f.result()))
        raise


def _withdraw(run: Attempt, key: StepKey, announced: Callable[[], None] | None) -> None:
    """A call that will not run after all: its announcement ended, its number free again."""
    if announced is not None:
        announced()
    run.release(key)


def _begin_live(run: Attempt, key: StepKey, announce: bool) -> tuple[Record | None, Callable[[], None] | None]:
    """Before a live call (in a thread: store round trips, and a wait): the record of an older
    attempt that was running this very call, once written; else the call announced, if
    ``announce`` (``tether.fence``). Raises ``Superseded`` if a newer attempt has started."""
    older = run.older_call(key)
    if older is not None or not announce:
        return older, None
    return None, run.announce(key)


#: The live tool calls this code runs inside (a sub-agent called as a tool calls tools too).
_enclosing_calls: contextvars.ContextVar[tuple[asyncio.Future[None], ...]] = contextvars.ContextVar("tether_enclosing_calls", default=())


async def _running_calls_done(run: Attempt) -> None:
    """Wait for the live tool calls of ``run`` running on this loop, except those this call runs
    inside: a call that suspends the run for an approval lets its parallel siblings finish and be
    recorded, so the next attempt replays them instead of running them again."""
    loop, inside = asyncio.get_running_loop(), _enclosing_calls.get()
    running = [f for f in list(run.tools_running) if f.get_loop() is loop and f not in inside]  # list(): one step under the GIL
    if running:
        await asyncio.wait(running)


async def _call_live(run: Attempt, spec: ToolSpec, args: dict[str, Any], canonical: dict[str, Any], key: StepKey) -> Any:
    fp = key[1]
    started = time.time()
    token = _idempotency_key.set(sha256_hex(f"{run.scope}\0{fp}\0{key[2]}".encode())[:32])
    try:
        with tool_scope(spec.secrets):
            value = await _invoke(spec, args)
        outcome, body = "ok", encode_result(value)
    except ToolRunnerUnavailable:
        raise  # not the tool's answer (its runner is down): not recorded, the next attempt sends it again
    except spec.retryable:
        raise
    except Exception as e:  # a tool crash is a terminal tool error the framework sees
        error_type = e.error_type if isinstance(e, ToolFailed) else type(e).__name__
        outcome, body = "error", encode_result({"type": error_type, "message": str(e)})
    finally:
        _idempotency_key.reset(token)
    record = Record(
        "tool", fp, key[2], outcome, canonical, {"tool": spec.name}, body, started_at=started, duration_ms=(time.time() - started) * 1000
    )
    await asyncio.to_thread(_commit, run, spec, record)
    run.account_tool(spec.name, replayed=False, outcome=outcome, duration_ms=record.duration_ms, key=key, record=record)
    return _from_record(spec, record)


def _cached(run: Attempt, spec: ToolSpec, canonical: dict[str, Any]) -> Record | None:
    data = run.store.get(_cache_key(spec, canonical))
    record = Record.decode(data) if data else None
    return record if record is not None and record.outcome == "ok" else None


def _commit(run: Attempt, spec: ToolSpec, record: Record) -> None:
    run.record(record)
    if spec.cache == "auto" and record.outcome == "ok":
        try:
            run.store.put(_cache_key(spec, record.request), record.encode())
        except StoreError:
            pass  # the cross-run cache is an optimisation; the journal record is what counts


async def _invoke(spec: ToolSpec, args: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(spec.fn):
        return await spec.fn(**args)
    result = await in_tool_thread(spec.fn, **args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def in_tool_thread(fn: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Run a sync tool function in a thread of its own, never on the event loop, in a copy of the
    caller's context: the thread sees the run, the idempotency key and this call's secrets
    (``tether.secrets``), and no other call's.

    A thread per call, not the loop's default executor (os.cpu_count() + 4 threads): a turn's
    parallel calls would queue there behind each other, and the journal writes that share it
    behind long-running tools. Nor a pool: its idle threads would outlive the calls (a process
    that forks, like a pre-started worker, must have none left).
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if done.done():  # the caller was cancelled meanwhile
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)

    def work() -> None:
        try:
            result, error = ctx.run(fn, **kwargs), None
        except BaseException as e:  # handed to the caller, like a call on the loop
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for this call any more

    thread = threading.Thread(target=work, name=f"tether-tool-{getattr(fn, '__name__', 'call')}")
    thread.start()
    try:
        return await done
    finally:
        if not done.cancelled():
            thread.join()  # it has only to return: no thread outlives its call


def call_tool_sync(spec: ToolSpec, args: dict[str, Any], *, run: Attempt | None = None) -> Any:
    """:func:`call_tool` for synchronous frameworks (runs on the wire loop if a loop is running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(call_tool(spec, args, run=run or current_attempt()))
    from .wire.loop import run_on_wire_loop

    ctx = contextvars.copy_context()
    return run_on_wire_loop(ctx.run(lambda: call_tool(spec, args, run=run or current_attempt())))


# ------------------------------------------------------ which modules may be tools or agents

TOOL_ENTRY_POINTS = "tether.tools"
AGENT_ENTRY_POINTS = "tether.agents"


def _allowed_modules(env_name: str, group: str, environ: Mapping[str, str] | None) -> tuple[str, ...]:
    import os

    raw = (os.environ if environ is None else environ).get(env_name)
    if raw is not None and raw.strip():
        return tuple(m.strip() for m in raw.split(",") if m.strip())
    from importlib.metadata import entry_points

    return tuple(sorted({ep.value.partition(":")[0].strip() for ep in entry_points(group=group)}))


def allowed_tool_modules(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Modules an AgentTool's ``implementation`` may come from (each with its submodules).

    ``$TETHER_TOOL_MODULES`` (comma-separated; the chart's ``tools.allowedModules``) when set;
    otherwise the modules that installed distributions declare in their entry-point group
    ``tether.tools`` (``[project.entry-points."tether.tools"] shop = "shop.tools"``).
    """
    return _allowed_modules(TOOL_MODULES_ENV, TOOL_ENTRY_POINTS, environ)


def allowed_agent_modules(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Modules an AgentRun's ``agent`` (bring your own) may come from, as for tools:
    ``$TETHER_AGENT_MODULES`` (the chart's ``agents.allowedModules``) when set, otherwise the
    modules installed distributions declare in the entry-point group ``tether.agents``."""
    return _allowed_modules(AGENT_MODULES_ENV, AGENT_ENTRY_POINTS, environ)


def module_refusal(path: str, allowed: tuple[str, ...], what: str, chart_value: str) -> str | None:
    """Why ``module:attribute`` may not be loaded as ``what`` (a tool, an agent), or None. The
    standard library never may, even if listed: ``subprocess:getoutput`` or ``os:system`` would
    hand the model (or the run's author) a shell."""
    import os
    import sys

    module = path.partition(":")[0]
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "builtins":
        return f"{path} is in the Python standard library, which never provides {what}s"
    if not any(module == a or module.startswith(a + ".") for a in allowed):
        listed = ", ".join(allowed) or "none"
        local = os.environ.get(LOCAL_RUN_ENV)
        if local:  # `tether run` on this machine: there is no chart, the manifest's folder is what counts
            env = TOOL_MODULES_ENV if what == "tool" else AGENT_MODULES_ENV
            how = f"a local run allows the modules beside its manifest in {local} and those in ${env}"
            return f"module {module} is not an allowed {what} module (allowed: {listed}; {how})"
        return f"module {module} is not an allowed {what} module (allowed: {listed}; chart value {chart_value})"
    return None


def implementation_refusal(implementation: str, allowed: tuple[str, ...]) -> str | None:
    """Why ``module:function`` may not be a tool, or None (see :func:`module_refusal`)."""
    return module_refusal(implementation, allowed, "tool", "tools.allowedModules")


def agent_refusal(agent: str, allowed: tuple[str, ...]) -> str | None:
    """Why ``module:attribute`` may not be an AgentRun's ``agent``, or None."""
    return module_refusal(agent, allowed, "agent", "agents.allowedModules")


def probe_implementation(implementation: str) -> str | None:
    """Why ``implementation`` cannot be a tool in this environment (not allowed, or not
    importable), or None. What the operator runs in a subprocess with the runtime's environment."""
    import importlib

    refusal = implementation_refusal(implementation, allowed_tool_modules())
    if refusal:
        return refusal
    module, _, attr = implementation.partition(":")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except Exception as e:  # ImportError, AttributeError, or the module's own failure
        return f"cannot import {implementation}: {type(e).__name__}: {e}"
    if not callable(fn):
        return f"{implementation} is not callable"
    return None


def import_tool(name: str, implementation: str, allowed: tuple[str, ...]) -> Callable[..., Any]:
    """AgentTool ``name``'s function, if its module is an allowed tool module (checked again
    wherever it is imported: the operator's check might have been bypassed)."""
    import importlib

    refusal = implementation_refusal(implementation, allowed)
    if refusal:
        raise ConfigError(f"AgentTool {name}: {refusal}")
    module_name, _, attr = implementation.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"AgentTool {name}: cannot import {implementation}: {e}") from e
    return fn  # type: ignore[no-any-return]
