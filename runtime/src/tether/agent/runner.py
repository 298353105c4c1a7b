"""``run_agent``: everything around the framework's own runner, done once for every adapter:
scope, store, journal, proxy, memory commit, approvals, progress, cost and the Flyte report.

``run_agent``'s keywords (the public API) and an AgentRun's spec (the entrypoint) both become an
:class:`AgentJob`, which :func:`run_job` runs."""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from .. import mcp
from ..api import AgentRunSpec, Limits
from ..errors import ConfigError, Interrupted, LimitExceeded, Suspended, describe
from ..journal import StepCounts
from ..memory import Memory
from ..progress import ProgressWriter
from ..run import Run, StepEvent
from ..stopping import until_stopped
from ..stores import Store, open_store
from ..stores.outage import patiently
from ..telemetry import NO_TRACE
from ..wire.providers import API_KEY_ENV
from ..wire.providers import upstreams as resolve_upstreams
from .adapter import Adapter, AgentSession, AgentSpec
from .in_flyte import flyte_ctx
from .report import render_report, wants_report
from .result import AgentResult
from .tool_object import as_tools


def infer_provider(model: str, default: str = "openai") -> tuple[str, str]:
    """``"anthropic:claude-sonnet-4-5"`` → ("anthropic", "claude-sonnet-4-5"); bare names by family."""
    if ":" in model:
        provider, _, name = model.partition(":")
        aliases = {"google": "gemini", "google-gla": "gemini", "openai-chat": "openai", "openai-responses": "openai"}
        provider = aliases.get(provider, provider)
        if provider in API_KEY_ENV:
            return provider, name
    for prefix, provider in (
        ("claude", "anthropic"),
        ("gemini", "gemini"),
        ("mistral", "mistral"),
        ("magistral", "mistral"),
        ("codestral", "mistral"),
        ("gpt", "openai"),
        ("o1", "openai"),
        ("o3", "openai"),
        ("o4", "openai"),
    ):
        if model.startswith(prefix):
            return provider, model
    return default, model


_calls = itertools.count()


def default_scope() -> str:
    """Inside a Flyte task: the Flyte run and action (stable across the action's attempts) plus a
    call counter; outside: a fresh id (the run is recorded but nothing can resume it by name)."""
    ctx = flyte_ctx()
    if ctx:
        action = ctx.action
        return f"flyte-{action.run_name}-{action.name}-{next(_calls)}"
    return f"local-{uuid.uuid4().hex[:16]}"


def default_store() -> Store:
    """Inside a Flyte task: under the run's own storage; outside: the local store."""
    ctx = flyte_ctx()
    if ctx and getattr(ctx, "run_base_dir", None) and not os.environ.get("TETHER_STORE"):
        return open_store(f"{ctx.run_base_dir.rstrip('/')}/tether")
    return open_store(None)


@dataclass(frozen=True)
class AgentJob:
    """One run of an agent, typed: what :func:`run_agent`'s keywords say (documented there), and
    what an AgentRun's spec says (:meth:`of_agent_run`). :func:`run_job` runs it."""

    prompt: str
    tools: Sequence[Any] = ()
    model: str | None = None
    instructions: str | None = None
    memory_key: str | None = None
    durable: bool = True
    agent: Any = None
    provider: str | None = None
    run_id: str | None = None
    store: Store | str | None = None
    namespace: str = "default"
    upstreams: dict[str, str] | None = None
    max_turns: int | None = None
    max_cost_usd: float | None = None
    unknown_cost: str = "stop"
    stream: bool = False
    report: bool | None = None
    on_step: Callable[[StepEvent], None] | None = None

    @classmethod
    def of_agent_run(
        cls,
        spec: AgentRunSpec,
        tools: Sequence[Any],
        *,
        run_id: str,
        store: str,
        namespace: str,
        on_step: Callable[[StepEvent], None] | None,
    ) -> AgentJob:
        """The AgentRun's spec as a job (``tools``: its AgentTools as Tools, in its order)."""
        model = spec.model
        return cls(
            spec.input,
            tools,
            model=model.name,
            provider=model.provider,
            upstreams={model.provider: _upstream(model.base_url)} if model.base_url else None,
            instructions=spec.instructions,
            agent=spec.agent,
            memory_key=spec.memory_key,
            durable=spec.durable,
            run_id=run_id,
            store=store,
            namespace=namespace,
            on_step=on_step,
            **(spec.limits or Limits()).model_dump(),  # max_turns, max_cost_usd, unknown_cost: the same names
        )


def _upstream(base_url: str) -> str:
    """AgentRun baseURL may carry the API version (``…/v1``); upstreams never do."""
    base = base_url.rstrip("/")
    for suffix in ("/v1", "/v1beta"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


async def run_agent(
    adapter: Adapter,
    prompt: str,
    *,
    tools: Sequence[Any] = (),
    model: str | None = None,
    instructions: str | None = None,
    memory_key: str | None = None,
    durable: bool = True,
    agent: Any = None,
    provider: str | None = None,
    run_id: str | None = None,
    store: Store | str | None = None,
    namespace: str = "default",
    upstreams: dict[str, str] | None = None,
    max_turns: int | None = None,
    max_cost_usd: float | None = None,
    unknown_cost: str = "stop",
    stream: bool = False,
    report: bool | None = None,
    on_step: Callable[[StepEvent], None] | None = None,
) -> AgentResult:
    """Run an agent with its own framework, durably.

    Give ``model`` (+ ``instructions``, ``tools``) for a declarative agent, or ``agent`` (an
    object of the framework, or an import path ``"pkg.mod:name"``) to bring your own.
    ``run_id`` names the run scope: the same id after a crash replays the finished steps
    (default: inside a Flyte task, the Flyte run and action; outside, a fresh id).
    ``store`` is where the journal lives: a directory or ``s3://bucket/prefix`` (default: the
    Flyte run's storage inside a task, else ``$TETHER_STORE`` or ``~/.tether/store``).
    ``memory_key`` names a memory shared by the runs of ``namespace`` that use it: it is loaded
    before the run and the run's turns are committed to it when it succeeds.
    ``provider`` (``openai``, ``anthropic``, ``gemini``, ``mistral``) is otherwise inferred from
    the model name. ``upstreams`` maps a provider to the base URL its calls go to, without the
    API version (``{"openai": "http://vllm:8000"}``); without it the provider SDK's own variable
    (``OPENAI_BASE_URL``...) or ``TETHER_UPSTREAM_<PROVIDER>`` decide (docs/endpoints.md).
    ``durable=False`` runs without a journal. ``max_turns`` bounds the model turns.
    ``max_cost_usd`` refuses live turns once reached; ``unknown_cost`` says what a live turn whose
    cost cannot be read does under it: ``"stop"`` (default, fail closed) or ``"ignore"`` ($0).
    ``stream`` has the framework stream its model answers. Inside a Flyte task the run's timeline
    goes to the task's report (published when the task is declared ``report=True``);
    ``report=False`` skips it.
    A tool waiting for approval ends the call with ``status="suspended"``; call again (same
    ``run_id``) after ``tether approve`` to continue.
    ``on_step`` is called with each step once it is durable: a live model turn's answer is handed
    to the framework first and recorded when the process turns to it (the next request sent, a
    tool call, the end of the run, or 1 ms later; ``tether.wire.seam``), so its event can come
    after the next request already left.
    """
    # Its parameters are AgentJob's fields, name for name (tests/core/test_runner.py holds them so).
    return await run_job(adapter, AgentJob(**{name: value for name, value in locals().items() if name != "adapter"}))


async def run_job(adapter: Adapter, job: AgentJob) -> AgentResult:
    """:func:`run_agent`'s work, for a typed job (the entrypoint's AgentRun: :meth:`AgentJob.of_agent_run`)."""
    if job.model is None and job.agent is None:
        raise ConfigError("run_agent needs a model (declarative) or an agent (bring your own)")
    if job.agent is not None and (job.tools or job.instructions):  # they would not reach it: never silently ignored
        raise ConfigError(
            "run_agent: a bring-your-own agent brings its own tools and instructions; tools= and instructions= would "
            "not reach it (make its tools Tether tools with the adapter's @tool, so that they are journaled)"
        )
    prov, model_name = infer_provider(job.model or "", job.provider or adapter.default_provider)
    prov = job.provider or prov
    # Store I/O never runs on the event loop (opening an S3 store, loading the journal, memory,
    # progress, approvals): other runs and the framework's own tasks share this loop.
    the_store = await asyncio.to_thread(open_store, job.store) if job.store is not None else await asyncio.to_thread(default_store)
    scope = job.run_id or default_scope()
    run = (
        await asyncio.to_thread(
            Run,
            scope,
            the_store,
            upstreams=job.upstreams,
            max_cost_usd=job.max_cost_usd,
            unknown_cost=job.unknown_cost,
            background_load=True,
            overlap_writes=True,
        )
        if job.durable
        else None
    )
    if run is not None and mcp.follows_active():
        mcp.serve(run)  # MCP clients pointed at the active run find it
    memory = Memory(the_store, job.namespace, job.memory_key) if job.memory_key else None
    session = AgentSession(
        run, prov, memory, max_turns=job.max_turns, stream=job.stream, upstreams=run.upstreams if run else resolve_upstreams(job.upstreams)
    )
    if memory is not None:
        try:
            session.history = await asyncio.to_thread(patiently, lambda: memory.load(writer=scope), "reading the run's memory")
        except Exception:
            if run is not None:
                await run.loaded()  # a journal that cannot load is the cause to report first
            raise
    progress = ProgressWriter(run) if run else None
    if run and job.on_step:
        run.listeners.append(job.on_step)
    tool_objs = as_tools(job.tools)
    if run is not None:
        run.mcp_tools = [t.mcp for t in tool_objs if t.mcp is not None]
    result = AgentResult(None, "failed", scope)
    try:
        with run.activate() if run else _null():
            if job.agent is None:
                the_agent = adapter.build_spec(
                    AgentSpec(model_name, prov, job.instructions, tool_objs, max_turns=job.max_turns, model_id=job.model or ""), session
                )
            else:
                the_agent = adapter.load(job.agent) if isinstance(job.agent, str) else job.agent
            if run is not None:
                await run.loaded()  # loading beside the build above
                run.trace.describe(
                    **{"tether.framework": adapter.framework, "gen_ai.request.model": model_name, "gen_ai.provider.name": prov}
                )
            # A stop (SIGINT/SIGTERM under `tether exec`) lets running tool calls be recorded first.
            with run.trace.current() if run else _null():  # the framework's own spans: children of the attempt's
                running = asyncio.ensure_future(adapter.run(the_agent, job.prompt, session))
            result.output = await until_stopped(running, run)
            if run is not None:  # the last answers' records (written while the framework went on) are durable first
                await run.seam.recorded()
        result.status = "succeeded"
        if memory is not None:  # idempotent per writer: tried again while the store does not answer
            writer = scope if run is not None else f"{scope}-{uuid.uuid4().hex}"
            await asyncio.to_thread(patiently, lambda: memory.commit(session.new_items, writer=writer), "the memory commit")
    except Suspended as s:
        result.status, result.pending_approval = "suspended", s.approval_id
    except Interrupted as i:
        result.status, result.error = "interrupted", str(i)
        if progress:
            await progress.apublish("Interrupted", error=result.error)
            progress.close()
        raise
    except Exception as e:
        limit = run.limit_exceeded if run is not None else None
        result.error = limit or describe(e)
        if progress:
            await progress.apublish("Failed", error=result.error)
            progress.close()
        if limit:
            raise LimitExceeded(limit) from e
        raise
    finally:
        if run is not None:
            await run.aclose()  # first: it waits for streams still being recorded, which the figures count
            _fill(result, run)
            if result.pending_approval:
                run.trace.describe(**{"tether.approval.pending": result.pending_approval})
            if run.trace is not NO_TRACE:  # no exporter: nothing to end, no hop to a worker thread
                await asyncio.to_thread(run.trace.end, result.status, result.error, run_ended=result.status == "succeeded")
    if progress:
        phase = {"succeeded": "Succeeded", "suspended": "AwaitingApproval"}[result.status]
        try:
            # The result lives in this record only: written before the attempt says it succeeded,
            # waiting while the store does not answer; past that the attempt ends store-unreachable
            # and the next one replays to the result (no step runs again).
            await progress.apublish(phase, durable=phase == "Succeeded", result=result.output)
        finally:
            progress.close()
    if wants_report(job.report):
        await render_report(result)
    return result


def run_agent_sync(adapter: Adapter, prompt: str, **kwargs: Any) -> AgentResult:
    """:func:`run_agent` for synchronous code (not from inside a running event loop)."""
    return asyncio.run(run_agent(adapter, prompt, **kwargs))


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _fill(result: AgentResult, run: Run) -> None:
    c, a = run.counters, run.accounting
    result.attempt = run.attempt
    for count in fields(StepCounts):
        setattr(result, count.name, getattr(c, count.name))
    result.usage_live, result.usage_replayed = a.live.to_dict(), a.replayed.to_dict()
    result.cost_usd, result.saved_usd = a.live_cost_usd, a.saved_usd
    result.events = list(run.events)
    result.replay_ms = 1000 * (run.replay_s if run.replay_s is not None else time.time() - run.started_at)


def bind(adapter: Adapter) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(run_agent, run_agent_sync)`` bound to one adapter: what each package re-exports."""

    @functools.wraps(run_agent)
    async def bound(prompt: str, **kwargs: Any) -> AgentResult:
        return await run_agent(adapter, prompt, **kwargs)

    @functools.wraps(run_agent_sync)
    def bound_sync(prompt: str, **kwargs: Any) -> AgentResult:
        return run_agent_sync(adapter, prompt, **kwargs)

    return bound, bound_sync
