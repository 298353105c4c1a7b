"""The Hermes Agent adapter: Hermes' own ``AIAgent.run_conversation`` runs the loop.

model traffic  ``AIAgent(base_url=<the run's loopback proxy>/v1)``: Hermes builds its own HTTP
               clients (the streamed Chat Completions client and the model-discovery probes:
               ``/v1/models``, ``/api/tags``, ``/props``…), so the loopback proxy is the way in.
               Chat Completions turns are journaled; every other request passes through the seam
               unrecorded and is neither a model turn nor a cost. Sub-agents of ``delegate_task``
               inherit the parent's base URL, so their turns are journaled too.
tools          each Tether tool is registered in Hermes' tool registry (toolset ``tether``) with
               a handler that calls the tool seam; a terminal failure reaches the model as text;
               ``Suspended`` (approval pending) is a BaseException that Hermes' dispatcher lets
               through. Hermes runs tools (and sub-agents) on its own worker threads: each call
               runs in the run's context on the loop that called ``run``.
built-ins      declarative agents get no Hermes built-in tool; a bring-your-own agent keeps the
               toolsets it names (``enabled_toolsets``; Hermes' default "every toolset" is
               refused). Built-in tools are not journaled (README.md lists them).
home           Hermes keeps sessions, memories, skills and SOUL.md under its home directory and
               puts some of them (and the home's path) in its system prompt: each attempt gets a
               fresh home (Hermes' context-local home override) whose config turns off what
               would make the prompt depend on the host (the working directory's git snapshot,
               the Python toolchain probe) and has Hermes send its own User-Agent, by which the
               seam normalises the date, host and home facts left in the prompt (``normalise.py``
               registers how). See ``HOME_CONFIG``.
memory         the full transcript (``run_conversation``'s messages, tool calls and results
               included) under ``memory_key`` — see ``memory.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import fcntl
import functools
import inspect
import itertools
import json
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import pydantic

from tether.agent import Adapter, AgentSession, AgentSpec, Tool, tool_error_text
from tether.errors import ConfigError, ToolError
from tether.tools import ToolSpec, call_tool

from . import normalise  # noqa: F401 - registers Hermes' normaliser with the runtime's Chat Completions protocol
from .memory import Transcript

#: The Hermes toolset Tether tools are registered under.
TOOLSET = "tether"
#: The key sent when none is configured: the OpenAI client refuses to start without one, and a
#: replayed run never reaches the provider anyway.
PLACEHOLDER_KEY = "tether-no-api-key"
#: Hermes' own default for its tool-calling iterations.
DEFAULT_MAX_ITERATIONS = 90
#: config.yaml of each attempt's Hermes home: what Hermes would otherwise probe on the host and
#: write into the system prompt, where it would change the request (and so the fingerprint) from
#: one attempt or node to the next; and Hermes' own User-Agent (``HermesAgent/<version>``, which
#: it otherwise sends only to some providers: the OpenAI SDK's default names no client), by which
#: the seam knows Hermes' requests and normalises the date, host and home facts still in their
#: system prompt (see normalise.py).
HOME_CONFIG = """\
agent:
  coding_context: "off"       # no git/workspace snapshot of the working directory
  environment_probe: false    # no python/pip/uv probe line
model:
  default_headers:
    User-Agent: "HermesAgent/{version}"
"""


@contextlib.contextmanager
def attempt_home() -> Iterator[str]:
    """A fresh Hermes home for one attempt: ``$TMPDIR/tether-hermes/slot-N``, the lowest slot no
    other Hermes run on this machine holds (an flock), so concurrent runs never share a home. Its
    path is in Hermes' system prompt, normalised out of the fingerprint: any slot replays."""
    root = Path(tempfile.gettempdir()) / "tether-hermes"
    root.mkdir(parents=True, exist_ok=True)
    for slot in itertools.count():
        lock = open(root / f"slot-{slot}.lock", "w")  # noqa: SIM115 - held until the attempt ends
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        break
    home = root / f"slot-{slot}"
    try:
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        (home / "config.yaml").write_text(HOME_CONFIG.format(version=hermes_version()))
        yield str(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        lock.close()


def hermes_version() -> str:
    from hermes_cli import __version__

    return str(__version__)


def parameters_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema of ``fn``'s parameters (what Hermes' tool schemas carry)."""
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        fields[name] = (hints.get(name, Any), ... if p.default is p.empty else p.default)
    model: type[pydantic.BaseModel] = pydantic.create_model(f"{fn.__name__}_args", **fields)
    schema = model.model_json_schema()
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    schema.pop("title", None)
    return schema


class ToolBridge:
    """Tether tools as Hermes registry entries, called on the run's own loop and context.

    Hermes' registry is process-wide and keyed by tool name, and Hermes calls tools (and runs
    ``delegate_task`` children) on worker threads that do not inherit context variables. So a
    handler finds its run here: the run whose thread calls it, or else the one Hermes run active
    in this process (two concurrent Hermes runs in one process would be ambiguous: refused).
    A tool name that a Hermes built-in already holds is refused.
    """

    def __init__(self) -> None:
        self._runs: dict[str, _ActiveRun] = {}
        self._lock = threading.Lock()
        self._current: contextvars.ContextVar[_ActiveRun | None] = contextvars.ContextVar("tether_hermes_run", default=None)

    def register(self, tools: list[Tool]) -> None:
        from tools.registry import registry

        for t in tools:
            schema = {"name": t.name, "description": t.description, "parameters": parameters_schema(t.fn)}
            registry.register(name=t.name, toolset=TOOLSET, schema=schema, handler=functools.partial(self._handle, t.name))
            entry = registry.get_entry(t.name)
            if entry is None or entry.toolset != TOOLSET:
                raise ConfigError(f"tool name {t.name!r} is a Hermes built-in tool; give the Tether tool another name")

    @contextlib.contextmanager
    def active(self, tools: list[Tool]) -> Iterator[_ActiveRun]:
        run = _ActiveRun(f"tether-{uuid.uuid4().hex[:16]}", {t.name: t for t in tools}, asyncio.get_running_loop())
        token = self._current.set(run)
        run.context = contextvars.copy_context()
        with self._lock:
            self._runs[run.task_id] = run
        try:
            yield run
        finally:
            with self._lock:
                self._runs.pop(run.task_id, None)
            self._current.reset(token)

    def _find(self, task_id: str | None) -> _ActiveRun | None:
        """The calling run: from the thread's context (Hermes' conversation thread), Hermes'
        ``task_id`` (its concurrent-tool workers), or the only active run (``delegate_task``
        children on their own threads)."""
        if (run := self._current.get()) is not None:
            return run
        with self._lock:
            if task_id in self._runs:
                return self._runs[task_id]
            return next(iter(self._runs.values())) if len(self._runs) == 1 else None

    def _handle(self, name: str, args: dict[str, Any], task_id: str | None = None, **_: Any) -> str:
        run = self._find(task_id)
        if run is None:
            return json.dumps({"error": f"tool {name!r}: cannot tell which of several Hermes runs in this process called it"})
        t = run.tools.get(name)
        if t is None:
            return json.dumps({"error": f"tool {name!r} is not one of this run's tools"})
        try:
            value = run.call(t(**args))
        except ToolError as e:
            return tool_error_text(e)
        return value if isinstance(value, str) else json.dumps(value, default=str)


@dataclass
class _ActiveRun:
    task_id: str
    tools: dict[str, Tool]
    loop: asyncio.AbstractEventLoop
    context: contextvars.Context = field(default_factory=contextvars.Context)

    def call(self, coro: Any) -> Any:
        """Run ``coro`` on the run's loop from a Hermes thread and wait for it. The task takes
        the run's context (journal, Flyte action) from the scheduling call."""
        return self.context.copy().run(asyncio.run_coroutine_threadsafe, coro, self.loop).result()


def journal_delegation(hermes: Any, run: _ActiveRun) -> None:
    """``delegate_task`` through the tool seam, on this agent only (``_dispatch_delegate_task``
    is Hermes' single call site for it). Its result carries timings and fresh ids, which the
    coordinator's next request quotes: recorded once, a finished delegation is replayed — its
    sub-agents do not run again — and that next request is the same on every attempt. A
    delegation cut short by a crash runs again; its sub-agents' finished turns replay."""
    dispatch = hermes._dispatch_delegate_task

    def journaled(function_args: dict[str, Any]) -> str:
        here = contextvars.copy_context()  # this conversation thread's: its Hermes home, one-shot channel
        spec = ToolSpec("delegate_task", lambda **args: here.run(dispatch, args))
        try:
            value = run.call(call_tool(spec, dict(function_args)))
        except ToolError as e:
            return tool_error_text(e)
        return value if isinstance(value, str) else json.dumps(value, default=str)

    hermes._dispatch_delegate_task = journaled


BRIDGE = ToolBridge()


class HermesAgent:
    """A Hermes ``AIAgent`` to be built for a run: ``factory(base_url=..., api_key=...)`` is
    called inside the attempt (with its fresh Hermes home) and must pass both to ``AIAgent``."""

    def __init__(
        self,
        factory: Callable[..., Any],
        tools: list[Tool] | None = None,
        system_message: str | None = None,
        mcp_servers: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.factory = factory
        self.tools = tools or []
        self.system_message = system_message
        #: Hermes' own MCP client: ``{name: {"url": tether.mcp_url(...)}}`` or ``{name:
        #: tether.mcp_stdio(...)}``, as Hermes' ``mcp_servers`` config takes them; connected by
        #: Hermes (``tools.mcp_tool.register_mcp_servers``) before the agent is built, its tools in
        #: toolset ``mcp-<name>`` (name them in ``enabled_toolsets``). Hermes keeps a server
        #: connected for the process's life, so build the URLs outside a run (they follow the
        #: active run: README.md, "MCP servers").
        self.mcp_servers = dict(mcp_servers or {})


class HermesAdapter(Adapter):
    framework = "hermes"
    providers = ("openai",)

    def build(self, spec: AgentSpec, session: AgentSession) -> HermesAgent:
        from run_agent import AIAgent

        factory = functools.partial(
            AIAgent,
            model=spec.model,
            enabled_toolsets=[TOOLSET],  # only the manifest's tools: no Hermes built-in
            max_iterations=spec.max_turns or DEFAULT_MAX_ITERATIONS,
            ephemeral_system_prompt=spec.instructions,
            quiet_mode=True,
            skip_context_files=True,  # AGENTS.md/.cursorrules of the working directory
            skip_memory=True,  # Hermes' own MEMORY.md: memory is the transcript under memoryKey
            save_trajectories=False,
        )
        return HermesAgent(factory, spec.tools)

    def load(self, import_path: str) -> Any:
        return self._coerce(super().load(import_path), import_path)

    @staticmethod
    def _coerce(agent: Any, what: str) -> HermesAgent:
        if isinstance(agent, HermesAgent):
            return agent
        if callable(agent):
            return HermesAgent(agent)
        raise ConfigError(
            f"{what!r} must be a HermesAgent or a factory(base_url=..., api_key=...) returning a Hermes AIAgent "
            f"(got {type(agent).__name__}): Hermes builds its HTTP clients in its constructor"
        )

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        spec = self._coerce(agent, "agent")
        BRIDGE.register(spec.tools)
        base_url = (session.proxy_url("openai") if session.durable else session.upstream("openai")) + "/v1"
        api_key = session.api_key("openai") or PLACEHOLDER_KEY
        memory = Transcript(session)
        history = memory.load()

        def converse(home: str, active: _ActiveRun) -> dict[str, Any]:
            from gateway.session_context import declare_stateless_channel
            from hermes_constants import reset_hermes_home_override, set_hermes_home_override

            token = set_hermes_home_override(home)
            # A Tether attempt is a one-shot run: nothing can take a result after it ends, so
            # delegate_task runs its sub-agents within the turn (not detached in the background).
            declare_stateless_channel()
            try:
                if spec.mcp_servers:
                    connect_mcp_servers(spec.mcp_servers)
                hermes = spec.factory(base_url=base_url, api_key=api_key)
                built.append(hermes)
                check(hermes, base_url)
                journal_delegation(hermes, active)
                if session.max_turns:
                    hermes.max_iterations = session.max_turns
                try:
                    return dict(
                        hermes.run_conversation(
                            prompt, system_message=spec.system_message, conversation_history=list(history), task_id=active.task_id
                        )
                    )
                finally:
                    hermes.close()
            finally:
                reset_hermes_home_override(token)

        built: list[Any] = []
        with BRIDGE.active(spec.tools) as active, attempt_home() as home:
            try:
                result = await in_own_thread(converse, home, active)
            except asyncio.CancelledError:
                # The attempt ends (a stop, or an MCP call at the wire waiting for approval) while
                # Hermes' loop runs on its thread: Hermes' own interrupt ends it, or it would go on
                # asking for turns the attempt refuses (and the process would wait for the thread).
                for hermes in built:
                    hermes.interrupt("the Tether attempt is ending")
                raise
        if result.get("failed"):
            raise RuntimeError(f"Hermes run failed: {result.get('error') or result.get('turn_exit_reason')}")
        messages = list(result.get("messages") or [])
        memory.add(messages[len(history) :])
        return str(result.get("final_response") or "")


def connect_mcp_servers(servers: dict[str, dict[str, Any]]) -> None:
    """Hermes' own MCP client connects to ``servers`` (once per process, as Hermes does); a server
    that fails to connect fails the attempt, naming it (Hermes itself would only log it)."""
    from tools.mcp_tool import _server_connect_errors, register_mcp_servers

    register_mcp_servers(servers)
    failed = {name: _server_connect_errors[name] for name in servers if name in _server_connect_errors}
    if failed:
        raise RuntimeError("Hermes could not connect to MCP server(s): " + "; ".join(f"{n}: {e}" for n, e in failed.items()))


async def in_own_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn`` on a thread of its own, in a copy of this context. Not the loop's default executor:
    Hermes blocks its thread while a tool runs, and a sync Tether tool runs on that executor, so
    enough concurrent runs holding all of its workers would wait on each other forever."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-hermes")
    try:
        ctx = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(pool, functools.partial(ctx.run, fn, *args))
    finally:
        pool.shutdown(wait=False)


def check(hermes: Any, base_url: str) -> None:
    """Refuse an agent that would bypass the seam or enable every built-in tool."""
    if (getattr(hermes, "base_url", "") or "").rstrip("/") != base_url.rstrip("/"):
        raise ConfigError("the Hermes agent factory must pass base_url (and api_key) on to AIAgent, or its model calls bypass Tether")
    if getattr(hermes, "enabled_toolsets", None) is None:
        raise ConfigError(
            "a Hermes agent must name its toolsets (enabled_toolsets=[...]): Hermes' default enables every built-in tool, "
            "terminal and file tools on the host included"
        )
