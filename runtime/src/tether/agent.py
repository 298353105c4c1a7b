"""The adapter contract and the Python API every ``tether_<framework>`` package exposes.

An adapter is small: it turns an :class:`AgentSpec` into the framework's idiomatic agent
(declarative) or takes the user's own agent (bring your own), points the framework's model
clients at the wire seam, presents :class:`Tool` objects as framework tools, maps memory onto
the framework's own notion, and runs the framework's own runner — never a loop of ours.

    class Adapter:                       # one per framework, same shape in each package
        framework = "openai"
        def build(spec, session)         # declarative agent from model + instructions + tools
        def load(import_path)            # bring your own: "myapp.agents:agent" (default: import it)
        async def run(agent, prompt, session) -> str   # the framework's runner; returns the answer

Everything else — scope, store, journal, proxy, memory commit, approvals, progress, cost,
the Flyte report — is done once, here, by :func:`run_agent`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import itertools
import os
import sys
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from .errors import ConfigError, Interrupted, LimitExceeded, Suspended, ToolError
from .memory import Memory
from .progress import ProgressWriter
from .run import Run, StepEvent, current_run
from .stopping import until_stopped
from .stores import Store, open_store
from .tools import ToolSpec, call_tool, call_tool_sync, in_tool_thread
from .wire.providers import API_KEY_ENV
from .wire.providers import upstreams as resolve_upstreams

# -- tools ------------------------------------------------------------------------------------


class Tool:
    """A function — or a Flyte task — usable as a tool by every framework, through the tool seam.

    Inside a Flyte task context a Flyte task tool runs as a child task (its own image,
    resources, retries); outside one it runs in-process. Either way the call is journaled.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        cache: str = "off",
        retryable: Sequence[type[BaseException]] = (),
        approval: Any = None,
        version: str = "",
        cached_without_approval: bool = False,
    ) -> None:
        if cache not in ("off", "auto"):
            raise ConfigError(f"tool cache must be 'auto' or 'off', not {cache!r}")
        self.task: Any = fn if _is_flyte_task(fn) else None  # a flyte TaskTemplate
        #: Where the call runs instead of this process: a tool runner holding the tool's secrets
        #: (``tether.toolrunner.RunnerClient``); the seam around it stays here.
        self.runner: Any = None
        self.fn: Callable[..., Any] = cast(Any, fn).func if self.task is not None else fn  # the user's function
        self.name = name or self.fn.__name__
        self.description = description or inspect.getdoc(self.fn) or self.name
        self.spec = ToolSpec(
            self.name,
            self._execute,
            version=version,
            cache=cache,
            retryable=tuple(retryable),
            approval=approval,
            cached_without_approval=cached_without_approval,
        )
        self.spec.code = ToolSpec(self.name, self.fn).code  # the cache key follows the user's code
        functools.update_wrapper(self, self.fn)

    async def _execute(self, **kwargs: Any) -> Any:
        if self.runner is not None:
            return await self.runner.call(kwargs)
        if self.task is not None and flyte_ctx():
            return await self.task.aio(**kwargs)  # a child Flyte task
        if inspect.iscoroutinefunction(self.fn):
            result = await self.fn(**kwargs)
        else:  # a sync tool (a blocking client, a file) runs in a worker thread, never on the loop
            result = await in_tool_thread(self.fn, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def __call__(self, **kwargs: Any) -> Any:
        """Call through the tool seam; a terminal failure raises :class:`ToolError`."""
        return await call_tool(self.spec, kwargs)

    def call_sync(self, **kwargs: Any) -> Any:
        return call_tool_sync(self.spec, kwargs)

    def as_function(self, *, errors: str = "return") -> Callable[..., Any]:
        """An async function with the tool's own name, signature and docstring that calls the
        seam — what a framework's decorator (``function_tool``, ``StructuredTool``…) wraps.

        ``errors="return"`` hands a terminal tool failure to the model as text (the loop goes
        on); ``"raise"`` raises :class:`ToolError` for frameworks with their own tool-error path.
        """

        @functools.wraps(self.fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            bound = inspect.signature(self.fn).bind(*args, **kwargs)
            try:
                return await self(**bound.arguments)
            except ToolError as e:
                if errors == "raise":
                    raise
                return tool_error_text(e)

        call.__signature__ = inspect.signature(self.fn)  # type: ignore[attr-defined]
        call.__name__ = call.__qualname__ = self.name  # frameworks name the tool after the function
        return call

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def tool_error_text(e: ToolError) -> str:
    return f"Error: tool {e.tool} failed: {e.error_type}: {e.message}"


def _is_flyte_task(fn: Any) -> bool:
    # A Flyte task was made by an imported flyte: importing it here (~1 s) only to learn that a
    # plain function is not one would put Flyte on every agent's start-up path.
    flyte = sys.modules.get("flyte")
    return flyte is not None and isinstance(fn, flyte.TaskTemplate)


def flyte_ctx() -> Any:
    """The Flyte task context, or ``None`` outside a task. Only a process that imported ``flyte``
    (its entrypoint, a ``@env.task``) can be inside one, so Flyte is never imported to ask."""
    flyte = sys.modules.get("flyte")
    return (flyte.ctx() or None) if flyte is not None else None


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    cache: str = "off",
    retryable: Sequence[type[BaseException]] = (),
    approval: Any = None,
    version: str = "",
    cached_without_approval: bool = False,
) -> Any:
    """Make a function or a Flyte task a durable tool. Stack it over ``@env.task``::

        @tool(cache="auto")
        @env.task
        async def get_weather(city: str) -> str: ...

    ``approval`` (``True``, a prompt template such as ``"Refund {amount} to {order}?"``, or a
    callable) makes every call wait for a human decision without holding compute. Such a tool
    never reuses a result cached by an earlier run: ``cache="auto"`` with ``approval`` is refused
    unless ``cached_without_approval=True`` says a cached result may skip the human.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            cache=cache,
            retryable=retryable,
            approval=approval,
            version=version,
            cached_without_approval=cached_without_approval,
        )

    return wrap(fn) if fn is not None else wrap


def as_tools(tools: Sequence[Any]) -> list[Tool]:
    return [t if isinstance(t, Tool) else Tool(t) for t in tools]


# -- the contract ------------------------------------------------------------------------------


@dataclass
class AgentSpec:
    """A declarative agent."""

    model: str
    provider: str
    instructions: str | None = None
    tools: list[Tool] = field(default_factory=list)
    name: str = "agent"
    max_turns: int | None = None
    #: The model as the caller wrote it (``"openai-chat:gpt-4o-mini"``), for frameworks whose
    #: prefixes say more than the provider does.
    model_id: str = ""


@dataclass
class AgentSession:
    """What an adapter gets for one ``run_agent`` call."""

    run: Run | None
    provider: str
    memory: Memory | None = None
    #: Items committed to memory by earlier runs (the framework's own item format).
    history: list[Any] = field(default_factory=list)
    #: Items this run adds; committed as one segment only if the run succeeds.
    new_items: list[Any] = field(default_factory=list)
    max_turns: int | None = None
    stream: bool = False
    #: Upstream base URL per provider (``run_agent(upstreams=)`` over the defaults).
    upstreams: dict[str, str] = field(default_factory=lambda: resolve_upstreams())

    @property
    def durable(self) -> bool:
        return self.run is not None

    def upstream(self, provider: str | None = None) -> str:
        """Base URL (origin + prefix, no version segment) for SDK clients using in-process transports."""
        return self.upstreams[provider or self.provider]

    def proxy_url(self, provider: str | None = None) -> str:
        """Base URL of the loopback proxy for this run (no version segment): for SDKs Tether
        cannot hand an HTTP client, subprocess CLIs and agents written in other languages."""
        from .wire.proxy import shared_proxy

        provider = provider or self.provider
        if self.run is None:
            return self.upstream(provider)
        return shared_proxy().base_url(self.run, provider)

    def http_client(self, provider: str | None = None, *, sync: bool = False, module: str = "httpx") -> Any:
        """An httpx (or httpx-compatible ``module``) client whose transport is the wire seam."""
        from .wire.transport import transports_for

        http = importlib.import_module(module)
        async_cls, sync_cls = transports_for(http)
        provider = provider or self.provider
        timeout = http.Timeout(600.0, connect=30.0)
        if sync:
            return http.Client(transport=sync_cls(provider, self.run), timeout=timeout)
        return http.AsyncClient(transport=async_cls(provider, self.run), timeout=timeout)

    def api_key(self, provider: str | None = None) -> str | None:
        return os.environ.get(API_KEY_ENV[provider or self.provider])


class Adapter(ABC):
    """Base of every framework adapter."""

    #: The AgentRun ``framework`` id.
    framework: ClassVar[str]
    #: The wire provider the framework uses when a spec names none.
    default_provider: ClassVar[str] = "openai"

    @abstractmethod
    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        """The framework's idiomatic agent for a declarative spec, its model client pointed at the seam."""

    def load(self, import_path: str) -> Any:
        """Bring your own: ``"package.module:attribute"``. Adapters whose frameworks have
        factories (callables returning agents) call them here (see :meth:`load_instance`)."""
        return self.load_path(import_path)

    @staticmethod
    def load_path(import_path: str) -> Any:
        """The object at ``"package.module:attribute"``, or a :class:`ConfigError` saying why not."""
        module_name, _, attr = import_path.partition(":")
        if not attr:
            raise ConfigError(f"agent import path {import_path!r} must look like 'package.module:name'")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"cannot import agent {import_path!r}: {e}") from e
        return obj

    def load_instance(self, import_path: str, kind: type | tuple[type, ...], what: str) -> Any:
        """:meth:`load` for frameworks whose agents are instances of ``kind``: a factory (any other
        callable) is called; anything else is refused as not being ``what``."""
        obj = self.load_path(import_path)
        if callable(obj) and not isinstance(obj, kind):
            obj = obj()  # a factory
        if not isinstance(obj, kind):
            raise ConfigError(f"{import_path!r} is not {what} (got {type(obj).__name__})")
        return obj

    @abstractmethod
    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        """Run the framework's own runner on ``agent`` and return the final answer as text."""

    def warm_up(self) -> None:
        """Pay ahead what the framework pays on its first use in a process (lazy imports, models
        built on first use), so a warm worker (``tether exec --warm``) replays at once. Called
        outside any run: it must not touch a network, a store or the user's code. Default: nothing."""


# -- results -----------------------------------------------------------------------------------


@dataclass
class AgentResult:
    output: str | None
    #: ``succeeded``, ``suspended`` (waiting for an approval) or ``failed``.
    status: str
    run_id: str
    attempt: int = 0
    model_live: int = 0
    model_replayed: int = 0
    tool_live: int = 0
    tool_replayed: int = 0
    first_divergence: dict[str, Any] | None = None
    usage_live: dict[str, Any] = field(default_factory=dict)
    usage_replayed: dict[str, Any] = field(default_factory=dict)
    cost_usd: float = 0.0
    saved_usd: float = 0.0
    events: list[StepEvent] = field(default_factory=list)
    pending_approval: str | None = None
    error: str | None = None
    #: Time from the attempt's start to its first live step (or its end): what replay took.
    replay_ms: float = 0.0

    @property
    def suspended(self) -> bool:
        return self.status == "suspended"


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
    ``run_id`` names the run scope: the same id after a crash replays the finished steps.
    ``max_cost_usd`` refuses live turns once reached; ``unknown_cost`` says what a live turn whose
    cost cannot be read does under it: ``"stop"`` (default, fail closed) or ``"ignore"`` ($0).
    A tool waiting for approval ends the call with ``status="suspended"``; call again (same
    ``run_id``) after ``tether approve`` to continue.
    ``on_step`` is called with each step once it is durable: a live model turn's answer is handed
    to the framework first and recorded when the process turns to it (the next request sent, a
    tool call, the end of the run, or 10 ms later; ``tether.wire.seam``), so its event can come
    after the next request already left.
    """
    if model is None and agent is None:
        raise ConfigError("run_agent needs a model (declarative) or an agent (bring your own)")
    if agent is not None and (tools or instructions):  # they would not reach it: never silently ignored
        raise ConfigError(
            "run_agent: a bring-your-own agent brings its own tools and instructions; tools= and instructions= would "
            "not reach it (make its tools Tether tools with the adapter's @tool, so that they are journaled)"
        )
    prov, model_name = infer_provider(model or "", provider or adapter.default_provider)
    prov = provider or prov
    # Store I/O never runs on the event loop (opening an S3 store, loading the journal, memory,
    # progress, approvals): other runs and the framework's own tasks share this loop.
    the_store = await asyncio.to_thread(open_store, store) if store is not None else await asyncio.to_thread(default_store)
    scope = run_id or default_scope()
    run = (
        await asyncio.to_thread(
            Run,
            scope,
            the_store,
            upstreams=upstreams,
            max_cost_usd=max_cost_usd,
            unknown_cost=unknown_cost,
            background_load=True,
            overlap_writes=True,
        )
        if durable
        else None
    )
    memory = Memory(the_store, namespace, memory_key) if memory_key else None
    session = AgentSession(
        run, prov, memory, max_turns=max_turns, stream=stream, upstreams=run.upstreams if run else resolve_upstreams(upstreams)
    )
    if memory is not None:
        try:
            session.history = await asyncio.to_thread(memory.load, writer=scope)
        except Exception:
            if run is not None:
                await run.loaded()  # a journal that cannot load is the cause to report first
            raise
    progress = ProgressWriter(run) if run else None
    if run and on_step:
        run.listeners.append(on_step)
    tool_objs = as_tools(tools)
    result = AgentResult(None, "failed", scope)
    try:
        with run.activate() if run else _null():
            if agent is None:
                the_agent = adapter.build(
                    AgentSpec(model_name, prov, instructions, tool_objs, max_turns=max_turns, model_id=model or ""), session
                )
            else:
                the_agent = adapter.load(agent) if isinstance(agent, str) else agent
            if run is not None:
                await run.loaded()  # loading beside the build above
            # A stop (SIGINT/SIGTERM under `tether exec`) lets running tool calls be recorded first.
            result.output = await until_stopped(asyncio.ensure_future(adapter.run(the_agent, prompt, session)), run)
            if run is not None:  # the last answers' records (written while the framework went on) are durable first
                await run.seam.recorded()
        result.status = "succeeded"
        if memory is not None and run is not None:
            await asyncio.to_thread(memory.commit, session.new_items, writer=scope)
        elif memory is not None:
            await asyncio.to_thread(memory.commit, session.new_items, writer=f"{scope}-{uuid.uuid4().hex}")
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
        result.error = limit or f"{type(e).__name__}: {e}"
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
    if progress:
        phase = {"succeeded": "Succeeded", "suspended": "AwaitingApproval"}[result.status]
        await progress.apublish(phase, result=result.output)
        progress.close()
    if _wants_report(report):
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
    result.model_live, result.model_replayed = c.model_live, c.model_replayed
    result.tool_live, result.tool_replayed = c.tool_live, c.tool_replayed
    result.first_divergence = c.first_divergence
    result.usage_live, result.usage_replayed = a.live.to_dict(), a.replayed.to_dict()
    result.cost_usd, result.saved_usd = a.live_cost_usd, a.saved_usd
    result.events = list(run.events)
    result.replay_ms = 1000 * (run.replay_s if run.replay_s is not None else time.time() - run.started_at)


def _wants_report(report: bool | None) -> bool:
    """Inside a Flyte task the timeline is always logged to the task's report; Flyte publishes
    it only when the task was declared ``report=True``. ``report=False`` skips it."""
    return report is not False and flyte_ctx() is not None


async def render_report(result: AgentResult) -> None:
    """The run's timeline (turns and tools, live or replayed, tokens, cost) into the Flyte report."""
    import html

    import flyte.report

    rows = "".join(
        f"<tr><td>{e.index}</td><td>{e.kind}</td><td>{html.escape(e.name)}</td><td>{e.mode}</td>"
        f"<td>{e.outcome}</td><td>{e.usage.total}</td><td>${e.cost_usd:.6f}</td><td>{e.duration_ms:.0f} ms</td></tr>"
        for e in result.events
    )
    await flyte.report.log.aio(
        f"<h2>Tether run {html.escape(result.run_id)} — {result.status}</h2>"
        f"<p>attempt {result.attempt}: model {result.model_live} live / {result.model_replayed} replayed, "
        f"tools {result.tool_live} live / {result.tool_replayed} replayed; cost ${result.cost_usd:.6f}, saved ${result.saved_usd:.6f}</p>"
        "<table><tr><th>#</th><th>kind</th><th>name</th><th>mode</th><th>outcome</th><th>tokens</th><th>cost</th><th>time</th></tr>"
        f"{rows}</table>"
    )


def bind(adapter: Adapter) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``(run_agent, run_agent_sync)`` bound to one adapter: what each package re-exports."""

    @functools.wraps(run_agent)
    async def bound(prompt: str, **kwargs: Any) -> AgentResult:
        return await run_agent(adapter, prompt, **kwargs)

    @functools.wraps(run_agent_sync)
    def bound_sync(prompt: str, **kwargs: Any) -> AgentResult:
        return run_agent_sync(adapter, prompt, **kwargs)

    return bound, bound_sync


def load_adapter(framework: str) -> Adapter:
    """The adapter for a framework id (``pydantic-ai`` → package ``tether_pydantic_ai``)."""
    module = f"tether_{framework.replace('-', '_')}"
    try:
        adapter: Adapter = importlib.import_module(module).ADAPTER
        return adapter
    except ImportError as e:
        raise ConfigError(
            f"no adapter for framework {framework!r} in this environment: install the tether-{framework} package ({e})"
        ) from e


__all__ = [
    "Adapter",
    "AgentResult",
    "AgentSession",
    "AgentSpec",
    "Tool",
    "as_tools",
    "bind",
    "current_run",
    "load_adapter",
    "run_agent",
    "run_agent_sync",
    "tool",
    "tool_error_text",
]
