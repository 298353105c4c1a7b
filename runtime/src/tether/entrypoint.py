"""One attempt of an AgentRun: what ``tether exec`` runs, as a Flyte task.

The Flyte task ``agent_run`` takes the exec request (the AgentRun spec with its AgentTools,
resolved by the operator or by ``tether run``) and the store URL, runs the agent through its
framework adapter and returns an outcome whose ``exit_code`` executors understand:

    0  succeeded          3  suspended: waiting for a human approval (nothing is held)
    2  terminal failure   1  recoverable failure: start the attempt again (it replays)
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import flyte

from .agent import Tool, load_adapter, run_agent
from .api import AgentToolSpec, ExecRequest
from .errors import ConfigError, LimitExceeded, RecoverableStepError, StoreUnavailable

EXIT_SUCCEEDED, EXIT_RECOVERABLE, EXIT_TERMINAL, EXIT_SUSPENDED = 0, 1, 2, 3

env = flyte.TaskEnvironment(name="tether-runtime")


def tool_from_spec(name: str, spec: AgentToolSpec) -> Tool:
    module_name, _, attr = spec.implementation.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"AgentTool {name}: cannot import {spec.implementation}: {e}") from e
    if isinstance(fn, Tool):
        fn = fn.task or fn.fn
    approval = None
    if spec.approval and spec.approval.required:
        approval = spec.approval.prompt or True
    return Tool(fn, name=name, description=spec.description, cache=spec.cache, version=spec.version, approval=approval)


def _upstream(base_url: str) -> str:
    """AgentRun baseURL may carry the API version (``…/v1``); upstreams never do."""
    base = base_url.rstrip("/")
    for suffix in ("/v1", "/v1beta"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def classify_exception(e: BaseException) -> int:
    """Exit code for an exception that ended an attempt. SDKs wrap what the seam raised (e.g.
    an ``APIConnectionError`` around a refused cost limit), so the whole chain is read: a limit or
    bad input anywhere makes it terminal; else a transport-level or store failure or a retryable
    HTTP status makes it recoverable; anything else is terminal."""
    chain, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    if any(isinstance(x, (ConfigError, LimitExceeded)) for x in chain):
        return EXIT_TERMINAL
    for x in chain:
        if isinstance(x, (RecoverableStepError, StoreUnavailable, ConnectionError, TimeoutError)):
            return EXIT_RECOVERABLE
        status = getattr(x, "status_code", None) or getattr(x, "code", None)
        if isinstance(status, int) and (status in (408, 409, 429) or status >= 500):
            return EXIT_RECOVERABLE
        if type(x).__name__ in ("APIConnectionError", "APITimeoutError", "ConnectError", "ReadError", "RemoteProtocolError"):
            return EXIT_RECOVERABLE
    return EXIT_TERMINAL


async def execute(request: ExecRequest, store: str, on_step: Callable | None = None) -> dict[str, Any]:
    spec = request.spec
    outcome: dict[str, Any] = {"run_id": request.run_id}
    try:
        adapter = load_adapter(spec.framework)
        tools = [tool_from_spec(name, request.tools[name]) for name in spec.tools if name in request.tools]
        missing = [name for name in spec.tools if name not in request.tools]
        if missing:
            raise ConfigError(f"unknown AgentTool(s): {', '.join(missing)}")
        provider = spec.model.provider
        result = await run_agent(
            adapter,
            spec.input,
            tools=tools,
            model=spec.model.name,
            provider=provider,
            instructions=spec.instructions,
            agent=spec.agent,
            memory_key=spec.memory_key,
            durable=spec.durable,
            run_id=request.run_id,
            store=store,
            namespace=request.namespace,
            upstreams={provider: _upstream(spec.model.base_url)} if spec.model.base_url else None,
            max_turns=spec.limits.max_turns if spec.limits else None,
            max_cost_usd=spec.limits.max_cost_usd if spec.limits else None,
            unknown_cost=spec.limits.unknown_cost if spec.limits else "stop",
            on_step=on_step,
        )
    except Exception as e:
        outcome.update(status="failed", error=f"{type(e).__name__}: {e}", exit_code=classify_exception(e))
        return outcome
    outcome.update(
        status=result.status,
        output=result.output,
        attempt=result.attempt,
        pending_approval=result.pending_approval,
        model_live=result.model_live,
        model_replayed=result.model_replayed,
        tool_live=result.tool_live,
        tool_replayed=result.tool_replayed,
        cost_usd=result.cost_usd,
        saved_usd=result.saved_usd,
        replay_ms=round(result.replay_ms, 2),
        exit_code=EXIT_SUSPENDED if result.suspended else EXIT_SUCCEEDED,
    )
    return outcome


def step_printer(stream=sys.stdout) -> Callable:
    """Progress lines as steps complete (``stream=None``: silent); ``$TETHER_KILL_AFTER_STEP``
    SIGKILLs the process after that many steps (to watch a crash and a resume happen)."""
    kill_after = int(os.environ.get("TETHER_KILL_AFTER_STEP") or 0)

    def on_step(e) -> None:
        if stream is not None:
            _print_step(e, stream)
        if kill_after and e.index >= kill_after:
            if stream is not None:
                print(f"  ** killing the agent process after step {e.index} (--kill-after) **", file=stream, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    return on_step


def _print_step(e, stream) -> None:
    mode = "replayed" if e.replayed else "live    "
    what = f"turn  {e.name}" if e.kind == "model" else f"tool  {e.name}"
    tokens = f"{e.usage.total:>6} tok" if e.kind == "model" else " " * 10
    cost = f"${e.cost_usd:.5f}" if e.kind == "model" else ""
    err = "  (error)" if e.outcome == "error" else ""
    print(f"  step {e.index:>3}  {mode}  {what:<32} {tokens}  {cost}{err}", file=stream, flush=True)


@env.task
async def agent_run(request: str, store: str) -> str:
    """Run one attempt of an AgentRun (JSON exec request) against ``store``; JSON outcome."""
    show = os.environ.get("TETHER_PROGRESS") == "1"
    outcome = await execute(ExecRequest.model_validate_json(request), store, step_printer(sys.stdout if show else None))
    return json.dumps(outcome)
