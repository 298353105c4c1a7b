"""Secrets of one attempt: the provider key for the agent, each tool's own env for that tool only.

Where they come from (:func:`load`, the one reader; ``tether exec`` calls it first thing):

- ``$TETHER_SECRETS_DIR``: files ``model/apiKey`` and ``tools/<AgentTool>/<ENV_NAME>`` — what the
  Kubernetes executor mounts read-only from a projected Secret volume;
- ``$TETHER_SECRETS_FROM_ENV``: JSON ``{"model/apiKey": "VAR", "tools/<AgentTool>/<ENV>": "VAR"}``
  naming the variables that hold each secret (the same paths as the directory) — what the Flyte
  executor asks Flyte's secret injection for; the variables are removed as they are read;
- ``$TETHER_SECRETS``: JSON ``{"model": {"apiKey": "..."}, "tools": {"<tool>": {"ENV": "value"}}}``
  — what the local dev executor passes. It is removed from ``os.environ`` as it is read, before
  any agent or tool module is imported.

How each reaches its user:

- the provider key goes into the agent's environment under the provider's variable
  (``OPENAI_API_KEY``…), where the framework's SDK reads it; no tool secret is ever there;
- a tool's secrets exist only during that tool's own calls, held in a context variable that
  :func:`tether.tools.call_tool` sets around the call: ``tether.secret("NAME")`` reads them, and so
  does ``os.environ`` (``os.environ["NAME"]``, ``os.getenv``), which :func:`install_scoped_environ`
  makes a view over the real environment plus the current call's secrets. A context variable is
  per task and per thread, so two concurrent calls of different tools never see each other's
  values, and the agent's own code (outside any call) sees none.

Threat model, honestly. In one process this separates well-behaved code from credentials it was
not given; it is not a sandbox: in-process Python tools share the interpreter with the agent and
each other, and hostile code there can walk the interpreter's memory, read the secrets directory,
or read the provider key from the environment. So where it matters the boundary is a process
and a mount namespace, not a context variable:

- Kubernetes executor: every AgentTool with Secrets (or its own image or resources) runs in a
  tool runner (:mod:`tether.toolrunner`, ``tether tool-runner``), a container of its own whose
  secrets directory holds only ``tools/<that tool>/…``. The agent's container has only
  ``model/apiKey`` in its directory, never loads a tool secret, and sends such a tool's calls
  over a Unix socket (``$TETHER_TOOL_RUNNERS``): the agent's code, the framework and whatever the
  model talks them into can call the tool with arguments, never read its secret. The tool
  runner gets no provider key and no store credentials. It trusts its caller: journal, approvals
  and cache are the agent's seam, so code running in the agent's container could call the tool
  directly, without them (what keeps such code out is the module allowlists). Tools without
  secrets stay in the agent's process and can use what it holds (the provider key, and the
  store through the pod's store proxy, which serves the run's own keys only:
  :mod:`tether.stores.proxy`).
- Flyte executor: a tool with its own image or resources is a child task with its own secrets;
  the other tools' secrets are in the agent's task, separated as above in-process only.
- Local executor (development): everything in one process.

Which modules may be tools at all (``tools.allowedModules``, enforced by the operator, the
runtime and the tool runner) bounds the code on both sides. Child processes a tool starts inherit
the real process environment only: the overlay does not reach them (pass ``env=`` explicitly).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from .contract import SECRETS_DIR_ENV as SECRETS_DIR_ENV  # where the secrets are: one name for both sides
from .contract import SECRETS_ENV as SECRETS_ENV
from .contract import SECRETS_FROM_ENV as SECRETS_FROM_ENV


@dataclass(frozen=True)
class Secrets:
    """The secrets of one attempt (never printed: no repr of the values)."""

    model_key: str | None = field(default=None, repr=False)
    tools: Mapping[str, Mapping[str, str]] = field(default_factory=dict, repr=False)

    def values(self) -> list[str]:
        """Every secret value (to keep them out of anything written)."""
        found = [self.model_key] if self.model_key else []
        return found + [v for env in self.tools.values() for v in env.values() if v]


class SecretsError(ValueError):
    pass


def load(environ: os._Environ[str] | dict[str, str] | None = None) -> Secrets:
    """Read the attempt's secrets from ``$TETHER_SECRETS_DIR``, ``$TETHER_SECRETS_FROM_ENV`` or
    ``$TETHER_SECRETS`` (the last two removed from the environment as read). None set: none."""
    env = os.environ if environ is None else environ
    raw = env.pop(SECRETS_ENV, None)
    folder = env.get(SECRETS_DIR_ENV)
    if folder:
        return _from_dir(Path(folder))
    names = env.pop(SECRETS_FROM_ENV, None)
    if names:
        return _from_env(names, env)
    if not raw:
        return Secrets()
    try:
        doc = json.loads(raw)
        model_key = (doc.get("model") or {}).get("apiKey")
        tools = {str(t): {str(k): str(v) for k, v in (vals or {}).items()} for t, vals in (doc.get("tools") or {}).items()}
    except (ValueError, AttributeError, TypeError) as e:  # never echo the text: it holds the values
        raise SecretsError(f"${SECRETS_ENV} is not a JSON object of the expected shape ({type(e).__name__})") from None
    if model_key is not None and not isinstance(model_key, str):
        raise SecretsError(f"${SECRETS_ENV}: model.apiKey must be a string")
    return Secrets(model_key=model_key or None, tools=tools)


def _from_env(names: str, env: os._Environ[str] | dict[str, str]) -> Secrets:
    try:
        paths = json.loads(names)
        assert isinstance(paths, dict) and all(isinstance(v, str) for v in paths.values())
    except (ValueError, AssertionError):
        raise SecretsError(f"${SECRETS_FROM_ENV} is not a JSON object of path -> variable name") from None
    model_key: str | None = None
    tools: dict[str, dict[str, str]] = {}
    for path, var in paths.items():
        value = env.pop(var, None)
        if value is None:
            raise SecretsError(f"secret {path}: variable {var} is not set (was the secret injected?)")
        parts = path.split("/")
        if parts == ["model", "apiKey"]:
            model_key = value
        elif len(parts) == 3 and parts[0] == "tools":
            tools.setdefault(parts[1], {})[parts[2]] = value
        else:
            raise SecretsError(f"${SECRETS_FROM_ENV}: unknown secret path {path!r}")
    return Secrets(model_key=model_key, tools=tools)


def _from_dir(folder: Path) -> Secrets:
    if not folder.is_dir():
        raise SecretsError(f"${SECRETS_DIR_ENV}={folder} is not a directory")
    key_file = folder / "model" / "apiKey"
    model_key = key_file.read_text().strip() if key_file.is_file() else None
    tools: dict[str, dict[str, str]] = {}
    tools_dir = folder / "tools"
    if tools_dir.is_dir():
        for tool_dir in sorted(p for p in tools_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            # Projected volumes keep ..data symlinks and dot-dirs beside the files: skip them.
            tools[tool_dir.name] = {f.name: f.read_text() for f in sorted(tool_dir.iterdir()) if f.is_file() and not f.name.startswith(".")}
    return Secrets(model_key=model_key or None, tools=tools)


# ------------------------------------------------------------------- the current tool call

_current: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("tether_tool_secrets", default=MappingProxyType({}))


def secret(name: str, default: str | None = None) -> str | None:
    """The current tool call's secret ``name`` (an ``env`` entry of its AgentTool), else ``default``.
    Outside a tool call, and in another tool's call, there is none."""
    return _current.get().get(name, default)


@contextlib.contextmanager
def tool_scope(values: Mapping[str, str]) -> Iterator[None]:
    """Make ``values`` the secrets of the code that runs inside (one tool call)."""
    token = _current.set(dict(values))
    try:
        yield
    finally:
        _current.reset(token)


class _ScopedEnviron(os._Environ[str]):
    """``os.environ`` plus the current tool call's secrets (shadowing the real variables during
    the call). Writes go to the real environment, shared with the replaced object."""

    def __init__(self, base: os._Environ[str]) -> None:
        super().__init__(base._data, base.encodekey, base.decodekey, base.encodevalue, base.decodevalue)  # type: ignore[attr-defined]

    def __getitem__(self, key: str) -> str:
        overlay = _current.get()
        if key in overlay:
            return overlay[key]
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[str]:
        overlay = _current.get()
        yield from overlay
        yield from (k for k in super().__iter__() if k not in overlay)

    def __len__(self) -> int:
        overlay = _current.get()
        return len(overlay) + sum(1 for k in super().__iter__() if k not in overlay)

    def __repr__(self) -> str:
        real = {self.decodekey(k): self.decodevalue(v) for k, v in self._data.items()}  # type: ignore[attr-defined]
        return f"environ({real!r})"  # never the overlay


def install_scoped_environ() -> None:
    """Replace ``os.environ`` (and so ``os.getenv``) by the scoped view; idempotent."""
    if not isinstance(os.environ, _ScopedEnviron):
        os.environ = _ScopedEnviron(os.environ)  # noqa: B003 (same data: a view, not a reset)


# ------------------------------------------------------------------ the attempt's secrets

_attempt = Secrets()


def use(secrets: Secrets, provider_key_env: str | None) -> None:
    """Install ``secrets`` for this process: the provider key into the agent's environment, the
    tools' secrets held for :func:`tool_secrets`, ``os.environ`` scoped per tool call."""
    global _attempt
    _attempt = secrets
    if secrets.model_key and provider_key_env:
        os.environ[provider_key_env] = secrets.model_key
    install_scoped_environ()


def tool_secrets(tool: str) -> Mapping[str, str]:
    """The secrets of AgentTool ``tool`` for this attempt (empty if it has none)."""
    return _attempt.tools.get(tool, {})
