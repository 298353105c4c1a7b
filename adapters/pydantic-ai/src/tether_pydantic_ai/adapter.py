"""The Pydantic AI adapter: Pydantic AI's own ``Agent.run`` with its model traffic in the wire seam.

Pydantic AI keeps wire formats (``models/``) apart from who serves them (``providers/``: client,
auth, base URL). Tether only ever changes the second: every model it routes is the same model
class, name, settings and profile, served by a provider whose HTTP client is the wire seam.

    declarative   Agent(<Model with a seam provider>, instructions=..., tools=[Tool(...)])
    bring-your-own  agent.override(model=<the agent's model, served by a seam provider>) for the
                    agent and every agent its tools delegate to, then agent.run(...)

``agent.override`` is Pydantic AI's own extension point for swapping an agent's model (its testing
guide uses it); it is scoped by context variables and undone on exit, so nothing of the user's
agent changes and nothing global is patched. A model given as a name (``"openai:gpt-4o-mini"``)
is built by Pydantic AI's ``infer_model`` with Tether's provider factory; a model object keeps
everything but its provider.

Tools: each Tether tool is wrapped with ``pydantic_ai.Tool`` so Pydantic AI builds the schema
from the user's own signature and docstring. A terminal tool failure becomes ``ToolFailed`` —
Pydantic AI's exception for "this call is done and failed": the model sees the failure as the
tool's result and the loop goes on, without ``ModelRetry``'s "fix the errors and try again"
instructions and without using up the tool's retry budget (a failure replayed from the journal is
the same failure every time; retrying it would only end the run with ``UnexpectedModelBehavior``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import pydantic_ai
from pydantic_ai import Agent
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.providers import Provider
from pydantic_ai.toolsets import FunctionToolset
from pydantic_ai.usage import UsageLimits

from tether.agent import Adapter, AgentSession, AgentSpec, Tool, tool_error_text
from tether.errors import ConfigError, Suspended, ToolError

from .memory import MessageHistory

#: Pydantic AI provider names Tether routes → the Tether provider (wire upstream) serving them.
PROVIDERS = {
    "openai": "openai",  # `openai:` = Responses API
    "openai-responses": "openai",
    "openai-chat": "openai",  # Chat Completions
    "anthropic": "anthropic",
    "google": "gemini",  # the Gemini API
    "mistral": "mistral",
}

#: Tether provider → the Pydantic AI model prefix a declarative agent uses.
MODEL_PREFIX = {"openai": "openai", "anthropic": "anthropic", "gemini": "google", "mistral": "mistral"}

#: httpx-compatible module each provider's SDK takes a client of (all of them: ``httpx2`` in 2.68).
HTTP_MODULE = "httpx2"


class SeamProviders:
    """A Pydantic AI ``provider_factory`` whose providers send every request through the wire seam.

    One per run; it owns the HTTP clients it makes and closes them in :meth:`aclose`.
    """

    def __init__(self, session: AgentSession) -> None:
        self.session = session
        self._clients: list[Any] = []
        self._made: set[int] = set()

    def __call__(self, name: str, *, api_key: str | None = None) -> Provider[Any]:
        """A new provider for a Pydantic AI provider name (credentials from the environment, as
        Pydantic AI's own ``infer_provider`` takes them, unless ``api_key`` is given)."""
        tether = self._tether(name)
        http, base = self._http(tether), self.session.upstream(tether)
        key = api_key or self.session.api_key(tether)
        if tether == "openai":
            from pydantic_ai.providers.openai import OpenAIProvider

            return self._mark(OpenAIProvider(base_url=base + "/v1", api_key=key, http_client=http))
        if tether == "anthropic":
            from pydantic_ai.providers.anthropic import AnthropicProvider

            return self._mark(AnthropicProvider(base_url=base, api_key=key, http_client=http))
        if tether == "gemini":
            from pydantic_ai.providers.google import GoogleProvider

            return self._mark(GoogleProvider(base_url=base, api_key=key, http_client=http))
        from pydantic_ai.providers.mistral import MistralProvider

        return self._mark(MistralProvider(base_url=base, api_key=key, http_client=http))

    def reroute(self, provider: Provider[Any]) -> Provider[Any]:
        """The user's provider, served through the seam: its SDK client copied with the seam's
        base URL and HTTP client (API key, organisation, headers, retries kept) where the SDK can
        copy a client (OpenAI, Anthropic); otherwise a new provider with the user's API key."""
        tether = self._tether(provider.name)
        client: Any = provider.client
        if tether in ("openai", "anthropic") and hasattr(client, "copy"):
            base = self.session.upstream(tether) + ("/v1" if tether == "openai" else "")
            copied = client.copy(base_url=base, http_client=self._http(tether))
            if tether == "openai":
                from pydantic_ai.providers.openai import OpenAIProvider

                return self._mark(OpenAIProvider(openai_client=copied))
            from pydantic_ai.providers.anthropic import AnthropicProvider

            return self._mark(AnthropicProvider(anthropic_client=copied))
        if tether == "gemini":
            key = getattr(provider, "_api_key", None)
        else:
            key = getattr(getattr(getattr(client, "sdk_configuration", None), "security", None), "api_key", None)
        return self(provider.name, api_key=key if isinstance(key, str) else None)

    def routes(self, model: Model) -> bool:
        """True when ``model`` is already served by one of these providers."""
        return id(model.provider) in self._made

    def _tether(self, name: str) -> str:
        tether = PROVIDERS.get(name)
        if tether is None:
            raise ConfigError(f"Tether cannot route Pydantic AI provider {name!r}; supported: {', '.join(sorted(PROVIDERS))}")
        return tether

    def _http(self, tether: str) -> Any:
        http = self.session.http_client(tether, module=HTTP_MODULE)
        self._clients.append(http)
        return http

    def _mark(self, provider: Provider[Any]) -> Provider[Any]:
        self._made.add(id(provider))
        return provider

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()


def route_model(model: Model | str, providers: SeamProviders) -> Model:
    """The same model, its requests sent through the wire seam.

    A name is built by Pydantic AI's own ``infer_model`` with the seam's provider factory. A model
    object is copied with only its provider rerouted (class, name, settings and profile kept);
    wrappers (``FallbackModel``, ``WrapperModel``) are copied with their models routed; models that
    make no HTTP requests (``TestModel``, ``FunctionModel``) are returned as they are.
    """
    if isinstance(model, str):
        return infer_model(model, provider_factory=providers)
    if isinstance(model, FallbackModel):
        fallback = copy.copy(model)
        fallback.models = [route_model(m, providers) for m in model.models]
        return fallback
    if isinstance(model, WrapperModel):
        wrapper = copy.copy(model)
        wrapper.wrapped = route_model(model.wrapped, providers)
        return wrapper
    provider = model.provider
    if provider is None or providers.routes(model):
        return model
    routed = copy.copy(model)
    routed._provider = providers.reroute(provider)  # who serves it; the wire format stays the model's
    return routed


def delegates(agent: AbstractAgent[Any, Any]) -> list[AbstractAgent[Any, Any]]:
    """The agent and every agent its tools run (agent delegation), found through the names the
    tool functions use: module globals and closure variables, recursively."""
    found: dict[int, AbstractAgent[Any, Any]] = {id(agent): agent}
    queue = [agent]
    while queue:
        for fn in _tool_functions(queue.pop()):
            for value in _referenced(fn):
                if isinstance(value, AbstractAgent) and id(value) not in found:
                    found[id(value)] = value
                    queue.append(value)
    return list(found.values())


def _tool_functions(agent: AbstractAgent[Any, Any]) -> Iterator[Callable[..., Any]]:
    leaves: list[Any] = []
    for toolset in agent.toolsets:
        toolset.apply(leaves.append)
    for leaf in leaves:
        if isinstance(leaf, FunctionToolset):
            for t in leaf.tools.values():
                yield t.function


def _referenced(fn: Any) -> Iterator[Any]:
    while isinstance(fn, functools.partial):
        yield from (*fn.args, *fn.keywords.values())
        fn = fn.func
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    if not inspect.isfunction(fn):
        return
    try:
        names = inspect.getclosurevars(fn)
    except (TypeError, ValueError):
        return
    yield from names.nonlocals.values()
    yield from names.globals.values()


@contextlib.contextmanager
def routed(agent: AbstractAgent[Any, Any], providers: SeamProviders) -> Iterator[None]:
    """Route the model traffic of ``agent`` and of the agents it delegates to through the seam,
    with ``Agent.override(model=...)``; undone on exit."""
    with contextlib.ExitStack() as stack:
        for a in delegates(agent):
            model = a.model
            if model is None:
                if a is agent:
                    raise ConfigError(f"agent {a.name or a!r} has no model; give it one to run it with Tether")
                continue
            _check_http(a, model)
            new = route_model(model, providers)
            if new is not model:
                stack.enter_context(a.override(model=new))
        yield


def _check_http(agent: AbstractAgent[Any, Any], model: Model | str) -> None:
    """Refuse what would bypass the wire seam silently: the Responses WebSocket transport."""
    for settings in (getattr(model, "settings", None), getattr(agent, "model_settings", None)):
        if isinstance(settings, dict) and settings.get("openai_transport") == "websocket":
            raise ConfigError(
                f"agent {agent.name or agent!r}: openai_transport='websocket' bypasses Tether's wire seam; use the default HTTP transport"
            )


def pydantic_tool(t: Tool) -> pydantic_ai.Tool[Any]:
    """A Tether tool as a Pydantic AI tool: its own name, signature and docstring, called through
    the tool seam; a terminal failure is a ``ToolFailed`` the model sees."""
    call_seam = t.as_function(errors="raise")

    @functools.wraps(t.fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await call_seam(*args, **kwargs)
        except ToolError as e:
            raise ToolFailed(tool_error_text(e)) from e

    call.__signature__ = inspect.signature(t.fn)  # type: ignore[attr-defined]
    return pydantic_ai.Tool(call, name=t.name, description=t.description, takes_ctx=False)


class PydanticAIAdapter(Adapter):
    """Runs ``pydantic_ai`` agents with ``Agent.run``; see the module docstring."""

    framework = "pydantic-ai"

    def __init__(self) -> None:
        # The providers made for a session by ``build`` are closed by ``run`` (keyed by session id).
        self._providers: dict[int, SeamProviders] = {}

    def _providers_for(self, session: AgentSession) -> SeamProviders:
        return self._providers.setdefault(id(session), SeamProviders(session))

    def build(self, spec: AgentSpec, session: AgentSession) -> Agent[None, str]:
        prefix = MODEL_PREFIX.get(spec.provider)
        if prefix is None:
            raise ConfigError(f"no Pydantic AI model for provider {spec.provider!r}")
        # The model id as the user wrote it keeps pydantic-ai's own prefixes (openai-chat: vs openai:).
        model_id = spec.model_id if ":" in spec.model_id else f"{prefix}:{spec.model}"
        model = route_model(model_id, self._providers_for(session))
        return Agent(
            model,
            name=spec.name,
            instructions=spec.instructions,
            tools=[pydantic_tool(t) for t in spec.tools],
        )

    def load(self, import_path: str) -> AbstractAgent[Any, Any]:
        obj = super().load(import_path)
        if inspect.isfunction(obj) and not inspect.iscoroutinefunction(obj):
            obj = obj()  # a factory
        if not isinstance(obj, AbstractAgent):
            raise ConfigError(f"{import_path!r} is not a pydantic_ai Agent (got {type(obj).__name__})")
        return obj

    async def run(self, agent: Any, prompt: str, session: AgentSession) -> str:
        if not isinstance(agent, AbstractAgent):
            raise ConfigError(f"the pydantic-ai adapter runs pydantic_ai agents, not {type(agent).__name__}")
        providers = self._providers_for(session)
        memory = MessageHistory(session)
        kwargs: dict[str, Any] = {}
        if session.stream:
            kwargs["event_stream_handler"] = _drain  # Pydantic AI then streams every model response
        if session.max_turns:
            kwargs["usage_limits"] = UsageLimits(request_limit=session.max_turns)
        try:
            with routed(agent, providers):
                result = await agent.run(prompt, message_history=memory.load() or None, **kwargs)
        except BaseExceptionGroup as group:  # should a task group around parallel tools wrap it
            unwrapped = _unwrap(group)
            if unwrapped is group:
                raise
            raise unwrapped from None
        finally:
            self._providers.pop(id(session), None)
            await providers.aclose()
        memory.add(result.new_messages())
        output = result.output
        return output if isinstance(output, str) else json.dumps(_jsonable(output), sort_keys=True)


async def _drain(ctx: Any, events: Any) -> None:
    async for _ in events:
        pass


def _unwrap(group: BaseExceptionGroup) -> BaseException:
    """A pending approval inside a task group's exception group, so the run ends as suspended."""
    suspended, _ = group.split(Suspended)
    if suspended is None:
        return group
    found: BaseException = suspended
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found


def _jsonable(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)
