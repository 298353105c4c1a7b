"""One attempt of an AgentRun, as a Flyte task.

:func:`attempt` takes the run request (:class:`tether.contract.ExecRequest`: the AgentRun spec
with its AgentTools, resolved by the operator or by ``tether run``) and the store URL, runs the
agent through its framework adapter and returns the typed :class:`tether.contract.Outcome`, whose
``exit_code`` executors understand. Two edges reach it: ``tether exec`` hands it the request it
parsed (:func:`run_here`, a Flyte local execution in that process: nothing serialised), and the
Flyte executor's runs start the task ``agent_run`` (JSON request in, JSON outcome out: Flyte's wire).

    0  succeeded          3  suspended: waiting for a human approval (nothing is held)
    2  terminal failure   1  recoverable failure: start the attempt again (it replays)
    4  the store did not answer for longer than the attempt waits (``tether.stores.outage``):
       start it again, not counted against ``retries``
    130  interrupted (SIGINT/SIGTERM, tether.stopping): running tool calls were recorded first
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, TextIO

try:
    import flyte
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(f"tether's Flyte entrypoint needs Flyte: pip install 'tether[cli]' ({e})") from e

from . import secrets as tether_secrets
from . import telemetry
from .agent import Tool, load_adapter
from .agent.runner import AgentJob, run_job
from .api import AgentToolSpec, McpToolStatus
from .api.shared import parse_duration
from .contract import EXIT_INTERRUPTED as EXIT_INTERRUPTED  # the exit codes, importable from here too
from .contract import EXIT_RECOVERABLE as EXIT_RECOVERABLE
from .contract import EXIT_STORE_UNREACHABLE as EXIT_STORE_UNREACHABLE
from .contract import EXIT_SUCCEEDED as EXIT_SUCCEEDED
from .contract import EXIT_SUSPENDED as EXIT_SUSPENDED
from .contract import EXIT_TERMINAL as EXIT_TERMINAL
from .contract import (
    FLYTE_REMOTE_ENV,
    FLYTE_TOOL_TASKS_ENV,
    KILL_AFTER_STEP_ENV,
    PROGRESS_ENV,
    PROVIDER_KEY_ENV,
    SECRETS_FROM_ENV,
    ExecRequest,
    Figures,
    Outcome,
    Progress,
    flyte_starts_prefix,
)
from .errors import ConfigError, Interrupted, LimitExceeded, RecoverableStepError, StoreAccessDenied, StoreUnavailable, describe
from .mcptool import McpClient, McpTool, without_unset
from .mcptool import parameters as mcp_parameters
from .progress import StepLines, step_text
from .run import StepEvent
from .secrets import tool_secrets
from .toolrunner import RunnerClient, _in_own_loop, describe_remote, stand_in, tool_runners
from .tools import (
    TOOL_MODULES_ENV,
    agent_refusal,
    allowed_agent_modules,
    allowed_tool_modules,
    idempotency_key,
    implementation_refusal,
    import_tool,
)

env = flyte.TaskEnvironment(name="tether-runtime")
tool_env = flyte.TaskEnvironment(name="tether-tool")
"""AgentTools with their own image or resources run as child tasks of this environment (the Flyte
executor deploys it per image and names them in ``$TETHER_FLYTE_TOOL_TASKS``)."""


def tools_from_spec(name: str, spec: AgentToolSpec, allowed: tuple[str, ...] | None = None) -> list[Tool]:
    """The AgentTool's tools: its function (:func:`tool_from_spec`), or each allowed tool of its
    MCP server (:func:`mcp_tools_from_spec`)."""
    return mcp_tools_from_spec(name, spec) if spec.mcp is not None else [tool_from_spec(name, spec, allowed)]


class McpCall:
    """Where a Tool of an MCP AgentTool sends its calls (``Tool.runner``): its tool runner, or
    with no runner (the local executor: one process) an MCP client in this process."""

    def __init__(self, described: McpTool, runner: RunnerClient | None, client: McpClient | None) -> None:
        self.described, self.runner, self.client = described, runner, client

    async def call(self, arguments: dict[str, Any]) -> Any:
        arguments = without_unset(self.described, arguments)
        if self.runner is not None:
            return await self.runner.call(arguments, mcp_tool=self.described.name)
        assert self.client is not None
        return await self.client.call(self.described.name, arguments, idempotency_key())


def mcp_tools_from_spec(name: str, spec: AgentToolSpec) -> list[Tool]:
    """One Tool per allowed tool of the AgentTool's MCP server, as its ``tools/list`` describes it
    (asked of its runner, which holds the server's credentials; in-process without one)."""
    assert spec.mcp is not None
    address = tool_runners().get(name)
    runner = RunnerClient(name, address) if address is not None else None
    client = None
    if runner is not None:
        described = [McpTool.from_json(t) for t in describe_remote(name, address or "")["mcp"]]
    else:
        timeout = parse_duration(spec.timeout) if spec.timeout else None
        client = McpClient(name, spec.mcp, tool_secrets(name), timeout)
        described = _in_own_loop(client.list_tools)
    approval_settings = spec.approval.prompt or True if spec.approval and spec.approval.required else None
    tools = []
    for mcp_tool in described:
        approval = approval_settings
        if approval is None and mcp_tool.needs_approval(spec.mcp):
            approval = f"Call {mcp_tool.name} of MCP server {name}, which it marks destructive?"
        tool = Tool(
            stand_in({"name": mcp_tool.name, "doc": mcp_tool.description, "params": mcp_parameters(mcp_tool)}),
            name=mcp_tool.name,
            description=mcp_tool.description or spec.description,
            cache=spec.effective_cache,
            version=spec.version,
            approval=approval,
            cached_without_approval=bool(spec.approval and spec.approval.cached_without_approval),
        )
        tool.runner = McpCall(mcp_tool, runner, client)
        tool.mcp = McpToolStatus(
            name=mcp_tool.name,
            agent_tool=name,
            read_only=mcp_tool.read_only,
            destructive=mcp_tool.destructive,
            idempotent=mcp_tool.idempotent,
            approval=approval is not None,
        )
        tool.spec.code = mcp_tool.code  # the cross-run cache follows the tool's definition
        tools.append(tool)
    return tools


def tool_from_spec(name: str, spec: AgentToolSpec, allowed: tuple[str, ...] | None = None) -> Tool:
    """The AgentTool as a Tool, if its module is an allowed tool module (checked again here: the
    operator's check might have been bypassed); it gets its own secrets, nobody else's."""
    if spec.implementation is None:
        raise ConfigError(f"AgentTool {name}: no implementation (an MCP server's tools come from tools_from_spec)")
    runner = tool_runners().get(name)
    allowed = allowed_tool_modules() if allowed is None else allowed
    described: dict[str, Any] | None = None
    try:
        fn = import_tool(name, spec.implementation, allowed)
    except ConfigError:
        if runner is None or implementation_refusal(spec.implementation, allowed):
            raise
        # Its module is only in the tool's own image: its runner says what the framework must know.
        described = describe_remote(name, runner)
        fn = stand_in(described)
    if isinstance(fn, Tool):
        fn = fn.task or fn.fn
    approval = None
    if spec.approval and spec.approval.required:
        approval = spec.approval.prompt or True
    tool = Tool(
        fn,
        name=name,
        description=spec.description,
        cache=spec.effective_cache,
        version=spec.version,
        approval=approval,
        cached_without_approval=bool(spec.approval and spec.approval.cached_without_approval),
    )
    if runner is not None:  # it runs in its own container, which alone holds its secrets
        tool.runner = RunnerClient(name, runner)
        if described is not None:
            tool.spec.code = described["code"]  # the cross-run cache follows the tool's own code
        return tool
    tool.spec.secrets = tool_secrets(name)
    child = json.loads(os.environ.get(FLYTE_TOOL_TASKS_ENV) or "{}").get(name)
    if child is not None and os.environ.get(FLYTE_REMOTE_ENV) == "1":
        tool.task = ChildToolTask(name, spec.implementation, child)
    return tool


class ChildToolTask:
    """An AgentTool called as a child Flyte task (``tool_call`` of the deployed ``tether-tool``
    environment, with the tool's own image, resources, secrets and cache): what
    :meth:`tether.agent.Tool._execute` awaits inside a running Flyte task. The call still goes
    through the tool seam first, so a recorded call is replayed, never run again."""

    def __init__(self, name: str, implementation: str, ref: dict[str, Any]) -> None:
        self.name, self.implementation, self.ref = name, implementation, ref

    async def aio(self, **kwargs: Any) -> Any:
        import flyte.remote

        task = flyte.remote.Task.get(self.ref["task"], version=self.ref["version"])
        overrides: dict[str, Any] = {}
        if self.ref.get("resources"):
            overrides["resources"] = flyte.Resources(**self.ref["resources"])
        if self.ref.get("cache"):  # cache: auto -> Flyte's cache, keyed by the tool's version
            overrides["cache"] = flyte.Cache(behavior="override", version_override=self.ref["cache"])
        env: dict[str, str] = {}
        if os.environ.get(TOOL_MODULES_ENV):  # the child enforces the allowlist its parent was given
            env[TOOL_MODULES_ENV] = os.environ[TOOL_MODULES_ENV]
        if self.ref.get("secrets"):  # the tool's own Secret references, injected into its task only
            overrides["secrets"] = [flyte.Secret(key=key, group=group, as_env_var=var) for group, key, _, var in self.ref["secrets"]]
            env[SECRETS_FROM_ENV] = json.dumps({path: var for _, _, path, var in self.ref["secrets"]})
        if env:
            overrides["env_vars"] = env
        if overrides:
            task = await task.override.aio(**overrides)
        out = await task(implementation=self.implementation, tool=self.name, arguments=json.dumps(kwargs, sort_keys=True, default=str))
        return json.loads(out)


def classify_exception(e: BaseException) -> int:
    """Exit code for an exception that ended an attempt. SDKs wrap what the seam raised (e.g.
    an ``APIConnectionError`` around a refused cost limit), so the whole chain is read: a limit,
    bad input or a store access denied anywhere makes it terminal; else a store that did not answer
    makes it store-unreachable (not counted against ``retries``); else a transport-level failure or
    a retryable HTTP status makes it recoverable; anything else is terminal."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    link: BaseException | None = e
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        chain.append(link)
        link = link.__cause__ or link.__context__
    if any(isinstance(x, (ConfigError, LimitExceeded, StoreAccessDenied)) for x in chain):
        return EXIT_TERMINAL
    if any(isinstance(x, StoreUnavailable) for x in chain):  # waited for up to its bound (tether.stores.outage)
        return EXIT_STORE_UNREACHABLE
    for x in chain:
        if isinstance(x, (RecoverableStepError, ConnectionError, TimeoutError)):
            return EXIT_RECOVERABLE
        status = getattr(x, "status_code", None) or getattr(x, "code", None)
        if isinstance(status, int) and (status in (408, 409, 429) or status >= 500):
            return EXIT_RECOVERABLE
        if type(x).__name__ in ("APIConnectionError", "APITimeoutError", "ConnectError", "ReadError", "RemoteProtocolError"):
            return EXIT_RECOVERABLE
    return EXIT_TERMINAL


async def attempt(request: ExecRequest, store: str, on_step: Callable[[StepEvent], None] | None = None) -> Outcome:
    """Run one attempt of the request against ``store``; how it ended (never raises)."""
    spec = request.spec
    try:
        missing = [name for name in spec.tools if name not in request.tools]
        if missing:
            raise ConfigError(f"unknown AgentTool(s): {', '.join(missing)}")
        # Agent and tools first: a module the admin did not allow is refused before any
        # framework code loads.
        refusal = agent_refusal(spec.agent, allowed_agent_modules()) if spec.agent else None
        if refusal:
            raise ConfigError(f"spec.agent: {refusal}")
        allowed = allowed_tool_modules()  # once: reading entry points scans every distribution
        tools = [tool for name in spec.tools for tool in tools_from_spec(name, request.tools[name], allowed)]
        named = [t.name for t in tools]
        if clashes := sorted({n for n in named if named.count(n) > 1}):
            raise ConfigError(f"two tools of spec.tools have the same name: {', '.join(clashes)} (an MCP server's tools included)")
        adapter = load_adapter(spec.framework)
    except Exception as e:  # the run could not start: say why where status is read, not only in a log
        failed = Outcome(request.run_id, "failed", classify_exception(e), error=describe(e))
        _publish_failed_start(store, request.run_id, failed.error or "")
        return _ended(failed, store)
    try:
        job = AgentJob.of_agent_run(spec, tools, run_id=request.run_id, store=store, namespace=request.namespace, on_step=on_step)
        result = await run_job(adapter, job)
    except Interrupted as e:  # a clean stop: what finished is recorded; the next attempt replays it
        return Outcome(request.run_id, "interrupted", EXIT_INTERRUPTED, error=str(e))
    except Exception as e:
        return _ended(Outcome(request.run_id, "failed", classify_exception(e), error=describe(e)), store)
    # The figures are the AgentResult's fields of the same names (replay time rounded).
    figures = Figures(**{f.name: getattr(result, f.name) for f in dataclasses.fields(Figures)} | {"replay_ms": round(result.replay_ms, 2)})
    return Outcome(request.run_id, result.status, EXIT_SUSPENDED if result.suspended else EXIT_SUCCEEDED, figures=figures)


def _ended(outcome: Outcome, store: str) -> Outcome:
    """A terminal failure ends the run: its trace gets the run's span (``tether.telemetry``)."""
    if outcome.exit_code == EXIT_TERMINAL:
        telemetry.run_failed(outcome.run_id, store, outcome.error or "")
    return outcome


def step_printer(stream: TextIO | None = sys.stdout, log: StepLines | None = None) -> Callable[[StepEvent], None]:
    """Progress lines as steps complete, each flushed as it happens (``stream=None``: silent),
    and kept in ``log`` (``tether logs``); ``$TETHER_KILL_AFTER_STEP`` SIGKILLs the process after
    that many steps (to watch a crash and a resume happen)."""
    kill_after = int(os.environ.get(KILL_AFTER_STEP_ENV) or 0)

    def say(line: str, attempt: int) -> None:
        if stream is not None:
            print(line, file=stream, flush=True)
        if log is not None:
            log.add(line, attempt)

    def on_step(e: StepEvent) -> None:
        say(step_line(e), e.attempt)
        if kill_after and e.index >= kill_after:
            say(f"  ** killing the agent process after step {e.index} (--kill-after) **", e.attempt)
            from .progress import flush_progress

            flush_progress()  # the summary read after the kill shows this step too
            if log is not None:
                log.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    return on_step


def step_line(e: StepEvent) -> str:
    return step_text(e.index, e.kind, e.name, e.mode, e.usage.total, e.cost_usd, e.outcome)


def _publish_failed_start(store: str, run_id: str, error: str) -> None:
    """Progress for an attempt that failed before the agent started: the cause, and no figures
    of an earlier attempt (the operator and ``tether run`` show this document)."""
    from .progress import write_progress
    from .stores import open_store

    try:
        write_progress(open_store(store), run_id, Progress(phase="Failed", error=error, updated_at=time.time()))
    except Exception:  # the store is what failed, or is unreachable: the exit code still tells
        pass


class RecoverableAttempt(RuntimeError):
    """The attempt failed in a way the next attempt can get past (it replays the journal)."""


@tool_env.task
async def tool_call(implementation: str, tool: str, arguments: str) -> str:
    """One call of AgentTool ``tool`` in its own task: JSON arguments in, JSON result out. Its
    secrets (and only its) are injected into this task by the Flyte executor."""
    secrets = tether_secrets.load()
    fn = import_tool(tool, implementation, allowed_tool_modules())
    if isinstance(fn, Tool):
        fn = fn.fn
    with tether_secrets.tool_scope(secrets.tools.get(tool, {})):
        result = fn(**json.loads(arguments))
        if inspect.isawaitable(result):
            result = await result
    return json.dumps(result, sort_keys=True, default=str)


@env.task
async def warm_up() -> None:
    """Run once by a warm worker (``tether exec --warm``) so that Flyte's first local run, which
    sets up what later runs reuse (hundreds of milliseconds), is not the attempt's; it also
    imports the wire seam (imported when a run starts) and starts the worker thread of the loop
    that store reads and writes use (an attempt's first ones would start it)."""
    from .wire import seam, transport  # noqa: F401

    await asyncio.to_thread(int)


@env.task
async def agent_run(request: str, store: str) -> str:
    """The Flyte executor's entry point: one attempt of an AgentRun (JSON run request) against
    ``store``; the JSON outcome. Parsed and serialised here, once: this is Flyte's wire."""
    parsed = ExecRequest.model_validate_json(request)
    remote = os.environ.get(FLYTE_REMOTE_ENV) == "1"
    if remote:  # no `tether exec` before this task: its secrets are read here, once
        tether_secrets.use(tether_secrets.load(), PROVIDER_KEY_ENV.get(parsed.spec.model.provider))
    starts = 0
    if remote:
        try:
            starts = await asyncio.to_thread(_claim_start, parsed, store)
        except Exception as e:  # a store that does not answer is recoverable: Flyte retries (and counts) it
            error = f"counting this attempt in the store: {type(e).__name__}: {e}"
            if classify_exception(e) in (EXIT_RECOVERABLE, EXIT_STORE_UNREACHABLE):
                raise RecoverableAttempt(error) from e
            return Outcome(parsed.run_id, "failed", EXIT_TERMINAL, error=error).to_json()
        if starts > parsed.spec.retries + 1:
            return _restarts_exhausted(parsed, starts).to_json()
    outcome = await attempt(parsed, store, step_printer(sys.stdout if os.environ.get(PROGRESS_ENV) == "1" else None))
    if remote and outcome.exit_code in (EXIT_RECOVERABLE, EXIT_INTERRUPTED, EXIT_STORE_UNREACHABLE):  # Flyte counts these
        raise RecoverableAttempt(outcome.error or "recoverable failure")
    if starts:
        outcome = dataclasses.replace(outcome, attempts=starts)
    return outcome.to_json()


def _claim_start(request: ExecRequest, store: str) -> int:
    """This start's number among the starts of this Flyte run's action (1: the first).

    The open-source Flyte backend takes a pod that exits with a bare exit code (SIGKILL, out of
    memory, a crash: no error file) for a system failure and makes the pod again under the same
    name and attempt number, without bound (its consecutive-failure counter is reset by the new
    pod's start), so neither its attempt count nor the task's retries ever see those attempts. The
    runtime counts them itself, in the run's store: one key per start of this Flyte run (a
    segment: a run resumed after an approval is a new Flyte run with retries of its own)."""
    from .stores import open_store

    ctx = flyte.ctx()
    action = ctx.action if ctx else None
    flyte_run, name = ((action.run_name or action.name) if action else "local"), (action.name if action else "a0")
    prefix = flyte_starts_prefix(request.run_id, flyte_run, name)
    the_store = open_store(store)
    n = len(the_store.list(prefix)) + 1
    while not the_store.create(f"{prefix}{n:05d}", str(time.time()).encode()):
        n += 1  # another start claimed it first
    return n


def _restarts_exhausted(request: ExecRequest, starts: int) -> Outcome:
    """The outcome of a start past the run's retries: nothing runs, the run fails saying why."""
    retries = request.spec.retries
    error = (
        f"attempt {starts}: retries exhausted ({retries}); the Flyte backend started the task again after "
        "a pod that exited with a bare exit code (killed, out of memory or crashed), which it does not count as an attempt"
    )
    return Outcome(request.run_id, "failed", EXIT_TERMINAL, error=error, attempts=starts, retries_exhausted=True)


@dataclasses.dataclass
class _Handed:
    request: ExecRequest
    store: str
    on_step: Callable[[StepEvent], None] | None
    outcome: Outcome | None = None


#: Attempts :func:`run_here` hands to :func:`attempt_here`, by a key only this process knows.
_handed: dict[str, _Handed] = {}


def run_here(request: ExecRequest, store: str, on_step: Callable[[StepEvent], None] | None = None) -> Outcome:
    """One attempt in this process, as a Flyte local execution (``tether exec``): inside Flyte's
    task context (a tool that is a Flyte task, the run's report), with the request handed over as
    the object the caller parsed and the outcome handed back typed. A local execution runs in this
    process, so nothing needs to cross a wire: only a key goes through Flyte."""
    key = uuid.uuid4().hex
    handed = _handed[key] = _Handed(request, store, on_step)
    try:
        flyte.run(attempt_here, key)
    finally:
        _handed.pop(key, None)
    assert handed.outcome is not None  # attempt() returns an outcome for every failure
    return handed.outcome


@env.task
async def attempt_here(key: str) -> None:
    """The task of :func:`run_here`: the attempt it handed over, in this process."""
    handed = _handed[key]
    handed.outcome = await attempt(handed.request, handed.store, handed.on_step)
