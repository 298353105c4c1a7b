"""The OpenAI Agents SDK adapter: the SDK's ``Runner`` runs the loop; Tether sits under it.

model traffic  RunConfig(model_provider=MultiProvider(openai_client=<seam client>)): every
               agent whose model is a name (or None: the SDK default) — handoff targets and
               ``agent.as_tool`` sub-agents included, since nested runs inherit the RunConfig —
               gets its model from a client whose httpx transport IS the wire seam.
               Agents holding their own ``OpenAIResponsesModel`` / ``OpenAIChatCompletionsModel``
               get, for the duration of the run, a copy of their client on a seam transport
               (same base URL, key and headers); the original is put back afterwards.
tools          ``agents.function_tool`` over ``Tool.as_function(errors="raise")``: the SDK
               builds the schema; a terminal tool failure goes down the SDK's own tool-error
               path and reaches the model as text; ``Suspended`` (approval pending) is a
               BaseException the SDK lets through.
memory         ``TetherSession`` (the SDK's Session protocol) over AgentSession.history/new_items.
tracing        off (``RunConfig(tracing_disabled=True)``: nothing is exported) unless OTEL_*
               variables configure an exporter (``tether.telemetry``): then the SDK's spans go
               into the run's OpenTelemetry trace under the attempt's span (``.tracing``; the
               SDK's own processor, which sends to OpenAI, is replaced).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tether import telemetry
from tether.agent import Adapter, AgentSession, AgentSpec, Tool, tool_error_text
from tether.errors import ToolError

from .memory import TetherSession

log = logging.getLogger("tether.openai")

#: The key sent when none is configured: the SDK refuses to build a client without one, and a
#: replayed run never reaches the provider anyway.
PLACEHOLDER_KEY = "tether-no-api-key"


def function_tool(t: Tool, **options: Any) -> Any:
    """A Tether tool as an ``agents.FunctionTool``; the SDK reads name, signature and docstring.
    ``options`` go to ``agents.function_tool`` (``timeout=``, ``is_enabled=``, ``strict_mode=``…).

    Use it for the tools of a bring-your-own agent: only tools that go through the tool seam are
    journaled (a plain ``@agents.function_tool`` runs again on every attempt).

    A terminal failure (``ToolError``, recorded) reaches the model as text through the SDK's
    ``failure_error_function``. Anything else raised below the tool seam — an exception the tool
    declared ``retryable``, a store that is down — is not a tool result: it fails the attempt
    (``run`` re-raises the original) so the next attempt runs the call again.
    """
    from agents import function_tool as sdk_function_tool

    call = t.as_function(errors="raise")

    async def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await call(*args, **kwargs)
        except ToolError:
            raise
        except Exception as e:
            raise _AttemptFailed(e) from e

    functools.update_wrapper(guarded, t.fn)
    guarded.__signature__ = inspect.signature(t.fn)  # type: ignore[attr-defined]
    described = t.description != (inspect.getdoc(t.fn) or t.fn.__name__)
    on_error = _tool_error
    if "failure_error_function" in options and options["failure_error_function"] is not None:
        own = options.pop("failure_error_function")

        def on_error(ctx: Any, error: Exception) -> Any:
            if isinstance(error, _AttemptFailed):
                raise error
            return own(ctx, error)

    options = {
        "name_override": t.name,
        "description_override": t.description if described else None,
        "failure_error_function": on_error,
        **options,
    }
    return sdk_function_tool(guarded, **options)


class _AttemptFailed(Exception):
    """Carries an exception from below the tool seam through the SDK's tool-error handling."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _tool_error(ctx: Any, error: Exception) -> str:
    if isinstance(error, ToolError):
        return tool_error_text(error)
    if isinstance(error, _AttemptFailed):
        raise error  # out of the SDK's handler: the SDK raises UserError from it, run() unwraps
    from agents.tool import default_tool_error_function

    return default_tool_error_function(ctx, error)  # e.g. arguments the model got wrong


def _attempt_failure(error: BaseException) -> Exception | None:
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, _AttemptFailed):
            return current.error
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def seam_client(session: AgentSession, provider: str = "openai") -> Any:
    """An ``AsyncOpenAI`` on the run's upstream whose HTTP client is the wire seam (in-process)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=session.upstream(provider) + "/v1",
        api_key=session.api_key(provider) or PLACEHOLDER_KEY,
        http_client=session.http_client(provider, module="httpx2"),
    )


class OpenAIAgentsAdapter(Adapter):
    """Runs ``agents.Agent`` objects with ``agents.Runner`` through Tether's seams."""

    framework = "openai"
    providers = ("openai",)

    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        from agents import Agent
        from agents.models.openai_responses import OpenAIResponsesModel

        model = OpenAIResponsesModel(spec.model, openai_client=_client(session, spec.provider))
        return Agent(name=spec.name, instructions=spec.instructions, model=model, tools=[function_tool(t) for t in spec.tools])

    def warm_up(self) -> None:
        """One run of a throwaway agent against canned in-process answers (a tool call, then a
        text; no network, tracing off, no run, nothing recorded): the SDK imports its Responses
        resource and builds its response and tool-call models on first use, which a retry would
        otherwise pay (measured: a second of a warm worker's replay, loaded)."""
        import asyncio

        import httpx2
        from agents import Agent, RunConfig, Runner
        from agents import function_tool as sdk_function_tool
        from agents.models.openai_responses import OpenAIResponsesModel
        from openai import AsyncOpenAI

        outputs = iter(_WARM_UP_OUTPUTS)

        def answer(request: Any) -> Any:
            return httpx2.Response(200, json=_warm_up_response(request, next(outputs, _WARM_UP_OUTPUTS[-1])))

        def echo(text: str) -> str:
            """Echo the text."""
            return text

        http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
        client = AsyncOpenAI(base_url="http://warm-up.invalid/v1", api_key=PLACEHOLDER_KEY, http_client=http)
        model = OpenAIResponsesModel("warm-up", openai_client=client)
        agent = Agent(name="warm-up", instructions="Warm up.", model=model, tools=[sdk_function_tool(echo)])
        asyncio.run(Runner.run(agent, "warm up", run_config=RunConfig(tracing_disabled=True)))

    def load(self, import_path: str) -> Any:
        """``"pkg.module:agent"``; a factory (``"pkg.module:make_agent"``) is called, and may be async."""
        from agents import AgentBase

        obj = super().load(import_path)
        if not isinstance(obj, AgentBase) and callable(obj):
            obj = obj()
        return obj

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        from agents import RunConfig, Runner
        from agents.models.multi_provider import MultiProvider

        if inspect.isawaitable(agent):
            agent = await agent
        client = _client(session, "openai")
        traced = telemetry.configured()
        if traced:
            from .tracing import install

            install()
        run_config = RunConfig(
            model_provider=MultiProvider(openai_client=client, openai_use_responses_websocket=False),
            tracing_disabled=not traced,
        )
        kwargs: dict[str, Any] = {"run_config": run_config}
        if session.memory is not None:
            kwargs["session"] = TetherSession(session)
        if session.max_turns:
            kwargs["max_turns"] = session.max_turns
        try:
            async with _routed_models(agent):
                if session.stream:
                    streamed = Runner.run_streamed(agent, prompt, **kwargs)
                    async for _ in streamed.stream_events():
                        pass
                    output = streamed.final_output
                else:
                    output = (await Runner.run(agent, prompt, **kwargs)).final_output
        except Exception as e:
            original = _attempt_failure(e)
            if original is None:
                raise
            raise original from None
        finally:
            await _close_clients(session)
        return _text(output)


def _warm_up_response(request: Any, output: list[dict[str, Any]]) -> dict[str, Any]:
    """A Responses answer in the shape the API sends (request settings echoed, usage details), so
    the warm-up builds the models a real answer needs."""
    body = json.loads(request.content or b"{}")
    return {
        "id": "resp_warm_up",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "completed_at": 0,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": None,
        "model": body.get("model", "warm-up"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2,
        },
        "user": None,
        "metadata": {},
    }


#: What the warm-up agent is answered: a tool call, then a text.
_WARM_UP_OUTPUTS: list[list[dict[str, Any]]] = [
    [
        {
            "type": "function_call",
            "id": "fc_warm_up",
            "call_id": "call_warm_up",
            "name": "echo",
            "arguments": '{"text": "ok"}',
            "status": "completed",
        }
    ],
    [
        {
            "type": "message",
            "id": "msg_warm_up",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}],
        }
    ],
]


# -- clients -----------------------------------------------------------------------------------


def _client(session: AgentSession, provider: str) -> Any:
    """One seam client per session and provider: the declarative model and the RunConfig share it."""
    clients = session.__dict__.setdefault("_tether_openai_clients", {})
    if provider not in clients:
        clients[provider] = seam_client(session, provider)
    return clients[provider]


async def _close_clients(session: AgentSession) -> None:
    for client in session.__dict__.pop("_tether_openai_clients", {}).values():
        await client.close()


# -- bring your own: models that carry their own client ------------------------------------------

_swap_lock = threading.Lock()
#: id(model) -> [model, original client, runs using the swap]
_swapped: dict[int, list[Any]] = {}


def agent_graph(root: Any) -> list[Any]:
    """Every agent reachable from ``root``: handoff targets and ``as_tool`` sub-agents."""
    from agents import AgentBase

    seen: dict[int, Any] = {}
    stack = [root]
    while stack:
        agent = stack.pop()
        if not isinstance(agent, AgentBase) or id(agent) in seen:
            continue
        seen[id(agent)] = agent
        for h in getattr(agent, "handoffs", None) or ():
            ref = getattr(h, "_agent_ref", None)
            stack.append(h if isinstance(h, AgentBase) else (ref() if ref is not None else None))
        for t in getattr(agent, "tools", None) or ():
            stack.append(getattr(t, "_agent_instance", None))
    return list(seen.values())


@asynccontextmanager
async def _routed_models(root: Any) -> AsyncIterator[None]:
    """Put a seam transport under each model instance that brought its own OpenAI client.

    The replacement client follows the *current* run (a context variable), so concurrent runs of
    one agent object in one process share it safely; the last run to finish puts back the
    original. Model names are routed by the RunConfig and need none of this.
    """
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from agents.models.openai_responses import OpenAIResponsesModel, OpenAIResponsesWSModel

    models = []
    for agent in agent_graph(root):
        model = getattr(agent, "model", None)
        if model is None or isinstance(model, str):
            continue
        if isinstance(model, OpenAIResponsesWSModel) or not isinstance(model, (OpenAIResponsesModel, OpenAIChatCompletionsModel)):
            log.warning("agent %r uses %s, which Tether cannot route: its model turns are not journaled", agent.name, type(model).__name__)
            continue
        if model._client is None or _is_seam_client(model._client):
            continue
        models.append(model)
    with _swap_lock:
        for model in models:
            entry = _swapped.get(id(model))
            if entry is None:
                entry = _swapped[id(model)] = [model, model._client, 0]
                model._client = model._client.with_options(http_client=_follow_run_http_client())
            entry[2] += 1
    try:
        yield
    finally:
        released = []
        with _swap_lock:
            for model in models:
                entry = _swapped[id(model)]
                entry[2] -= 1
                if entry[2] == 0:
                    released.append(model._client)
                    model._client = entry[1]
                    del _swapped[id(model)]
        for client in released:
            await client.close()


def _follow_run_http_client() -> Any:
    import httpx2

    from tether.wire.transport import transports_for

    transport = transports_for(httpx2)[0]("openai")  # no run: the current run, else pass-through
    return httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(600.0, connect=30.0))


def _is_seam_client(client: Any) -> bool:
    from tether.wire.transport import transports_for

    http = getattr(client, "_client", None)
    transport = getattr(http, "_transport", None)
    return any(isinstance(transport, transports_for(m)[0]) for m in ("httpx", "httpx2"))


def _text(output: Any) -> str:
    if output is None or isinstance(output, str):
        return output or ""
    if hasattr(output, "model_dump_json"):
        return str(output.model_dump_json())
    return json.dumps(output, default=str, ensure_ascii=False)
