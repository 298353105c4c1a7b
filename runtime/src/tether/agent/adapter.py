"""The adapter base: what one framework's adapter implements (:class:`Adapter`), the declarative
agent it builds (:class:`AgentSpec`), what it gets for one run (:class:`AgentSession`) and the
base of a memory kept as the framework's own list of objects (:class:`MemoryItems`)."""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from ..errors import ConfigError
from ..memory import Memory
from ..run import Run
from ..wire.providers import API_KEY_ENV
from ..wire.providers import upstreams as resolve_upstreams
from .tool_object import Tool

#: How a refusal names each provider's API.
_API_NAMES = {"openai": "OpenAI", "anthropic": "Anthropic Messages", "gemini": "Gemini", "mistral": "Mistral"}


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
        from ..wire.proxy import shared_proxy

        provider = provider or self.provider
        if self.run is None:
            return self.upstream(provider)
        return shared_proxy().base_url(self.run, provider)

    def http_client(self, provider: str | None = None, *, sync: bool = False, module: str = "httpx") -> Any:
        """An httpx (or httpx-compatible ``module``) client whose transport is the wire seam."""
        from ..wire.transport import transports_for

        http = importlib.import_module(module)
        async_cls, sync_cls = transports_for(http)
        provider = provider or self.provider
        timeout = http.Timeout(600.0, connect=30.0)
        if sync:
            return http.Client(transport=sync_cls(provider, self.run), timeout=timeout)
        return http.AsyncClient(transport=async_cls(provider, self.run), timeout=timeout)

    def api_key(self, provider: str | None = None) -> str | None:
        return os.environ.get(API_KEY_ENV[provider or self.provider])


T = TypeVar("T")


class MemoryItems(Generic[T]):
    """A ``memory_key`` as the framework's own list of objects (messages, events): :meth:`load`
    what earlier runs committed, :meth:`add` what this run adds (committed as one segment only if
    the run succeeds, so a crash never stores a turn twice). A subclass states how objects become
    JSON items and back (:meth:`encode`, :meth:`decode`)."""

    def __init__(self, session: AgentSession) -> None:
        self.session = session

    def load(self) -> list[T]:
        """Every object committed by earlier runs, oldest first."""
        return self.decode(self.session.history)

    def add(self, objects: Sequence[T]) -> None:
        """Objects this run adds (committed with the run, if it succeeds)."""
        self.session.new_items.extend(self.encode(objects))

    def encode(self, objects: Sequence[T]) -> list[Any]:
        raise NotImplementedError

    def decode(self, items: Sequence[Any]) -> list[T]:
        raise NotImplementedError


class Adapter(ABC):
    """Base of every framework adapter."""

    #: The AgentRun ``framework`` id.
    framework: ClassVar[str]
    #: The wire providers a declarative agent of this framework speaks (empty: any); others are
    #: refused by :meth:`build_spec` before :meth:`build`.
    providers: ClassVar[tuple[str, ...]] = ()

    #: Frameworks whose agents are instances of a class name it (or a tuple of classes) and how a
    #: refusal calls it, e.g. ``(Crew, "a CrewAI Crew")``: :meth:`load` then calls a factory and
    #: refuses anything else (:meth:`load_instance`).
    agent_kind: ClassVar[tuple[type | tuple[type, ...], str] | None] = None

    @property
    def default_provider(self) -> str:
        """The wire provider the framework uses when a spec names none: the first it speaks."""
        return self.providers[0] if self.providers else "openai"

    def build_spec(self, spec: AgentSpec, session: AgentSession) -> Any:
        """:meth:`build`, once the spec's provider is one this framework speaks."""
        if self.providers and spec.provider not in self.providers:
            speaks = " or ".join(_API_NAMES.get(p, p) for p in self.providers)
            raise ConfigError(
                f"declarative {self.framework} agents speak {speaks}; got provider {spec.provider!r} "
                "(use another framework, or bring your own agent)"
            )
        return self.build(spec, session)

    @abstractmethod
    def build(self, spec: AgentSpec, session: AgentSession) -> Any:
        """The framework's idiomatic agent for a declarative spec, its model client pointed at the seam."""

    def load(self, import_path: str) -> Any:
        """Bring your own: ``"package.module:attribute"``. Adapters whose frameworks have
        factories (callables returning agents) call them here (see :meth:`load_instance`)."""
        if self.agent_kind is not None:
            return self.load_instance(import_path, *self.agent_kind)
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
