"""An AgentTool that is an MCP server (``spec.mcp``): each of its allowed tools is a Tether tool.

    agent process (tether exec)                    tool side (tether tool-runner, or in-process
    one Tool per allowed MCP tool: name,           with the local executor): the MCP client
    description, schema from tools/list;           (the official ``mcp`` SDK), holding the
    journal, replay, approvals, cache    ---->     headers from Secrets / the stdio server's env

The MCP client is the tool side, never the agent: with the Kubernetes executor it runs in the
AgentTool's own runner container (its image, its Secrets), which answers the agent's ``describe``
with the allowed tools' definitions and each call with the server's result. A call reaches the
server only from the tool seam (:func:`tether.tools.call_tool`): a recorded call replays and the
server hears nothing; an approval is asked before it is sent.

- **Which tools**: ``mcp.tools`` only (required, no wildcard: a tool the server adds later is
  never offered); a name the server does not list fails the attempt at start (terminal).
- **Approval**: a tool the server marks destructive (MCP's defaults: ``destructiveHint`` true
  unless ``readOnlyHint`` is true or ``destructiveHint`` false) asks a human first unless
  ``mcp.destructiveNeedsApproval: false``; ``approval.required`` asks for every tool.
- **Results and errors**: the text of the result's text blocks (other blocks as their JSON;
  ``structuredContent`` when there are no blocks). An ``isError`` result or a JSON-RPC error answer is the
  tool's failure: recorded, the model sees it. A server that cannot be reached, an HTTP error
  status, a connection that drops, a timeout, an internal error:
  :class:`~tether.errors.ToolRunnerUnavailable`, not recorded; the next attempt
  sends the call again under the same idempotency key, which reaches the server in
  ``_meta["tether.dev/idempotency-key"]``.
- **Sessions**: calls share one MCP session per event loop (in the tool runner: one for its
  life, so a stdio server is one process), opened on the first call. A call that fails on a
  session held for a while (expired, the server restarted) is sent once more on a new session,
  as the next attempt would send it, under the same idempotency key; any other failure drops the
  session and the next call opens a new one.
- **Tasks** (long-running calls, MCP's tasks): not supported. The ``mcp`` SDK 2.3 carries the
  2025-11-25 task types only ("types-only ... never dispatched": neither ``Client.call_tool`` nor
  ``MCPServer`` sends or serves ``task``-augmented calls, ``tasks/get`` or ``tasks/result``), and
  2026-07-28 moved tasks to an extension the SDK ships no implementation of. A tool that requires
  task execution (``execution.taskSupport: required``) fails the attempt at start, naming it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import keyword
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, create_model

from .api import McpServer
from .errors import ConfigError, ToolRunnerUnavailable

IDEMPOTENCY_META = "tether.dev/idempotency-key"
"""The ``_meta`` key of a ``tools/call`` that carries the call's idempotency key."""
CALL_TIMEOUT = 300.0  # seconds a call may take without an AgentTool timeout (the SDK's read default)


class McpToolError(Exception):
    """The MCP server's answer to a call was an error (``isError``, or a JSON-RPC error): the
    tool's failure, recorded and shown to the model like any tool's."""


@dataclass(frozen=True)
class McpTool:
    """What the agent needs of one allowed MCP tool (its runner's ``describe`` answer)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    code: str = ""  # hash of the definition: the cross-run cache forgets results when it changes

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> McpTool:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})

    def needs_approval(self, server: McpServer) -> bool:
        return self.destructive and server.destructive_needs_approval


def _mcp() -> Any:
    try:
        import mcp
    except ImportError:
        raise ConfigError("an AgentTool with mcp needs the mcp package (pip install 'tether[mcp]') in the tool's image") from None
    return mcp


class _Held:
    """An MCP session held open on one event loop by a task of its own (anyio's scopes must be
    left by the task that entered them); calls on that loop share it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.client, self.opened = loop, cast(Any, None), time.monotonic()
        self.ready, self.stop = asyncio.Event(), asyncio.Event()
        self.error: Exception | None = None
        self.task: asyncio.Task[None] = cast(Any, None)

    def age(self) -> float:
        return time.monotonic() - self.opened


class McpClient:
    """The MCP client of one AgentTool: opens a session per request with the headers (or the
    stdio server's environment) from that tool's own secrets."""

    def __init__(self, agent_tool: str, server: McpServer, secrets: Mapping[str, str], timeout: float | None = None) -> None:
        self.agent_tool, self.server = agent_tool, server
        self._secrets = dict(secrets)
        self.timeout = timeout or CALL_TIMEOUT
        self._held: _Held | None = None

    def __repr__(self) -> str:  # never the secrets
        return f"McpClient({self.agent_tool!r})"

    def _client(self) -> Any:
        mcp = _mcp()
        if self.server.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers: dict[str, str] = {}
            for header in self.server.headers or []:
                value = self._secrets.get(header.name)
                if value is None:
                    raise ConfigError(f"AgentTool {self.agent_tool}: spec.mcp.headers {header.name}: no value in the tool's secrets")
                headers[header.name] = value.strip()
            http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=self.timeout))
            return mcp.Client(streamable_http_client(self.server.url, http_client=http), read_timeout_seconds=self.timeout)
        command = self.server.command or []
        # The server's environment: the SDK's harmless defaults (PATH, HOME...) and the tool's env
        # Secrets, never the runner's own variables.
        params = mcp.StdioServerParameters(command=command[0], args=command[1:], env=self._secrets)
        return mcp.Client(params, read_timeout_seconds=self.timeout)

    def _where(self) -> str:
        return self.server.url or " ".join(self.server.command or [])

    async def list_tools(self) -> list[McpTool]:
        """The allowed tools' definitions (``tools/list``, every page)."""
        listed: dict[str, Any] = {}
        try:
            async with self._client() as client:
                cursor: str | None = None
                for _ in range(100):  # a paginator that never ends cannot hang the start
                    page = await client.list_tools(cursor=cursor)
                    listed.update({t.name: t for t in page.tools})
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except ConfigError:
            raise
        except Exception as e:
            raise self._unavailable("listing its tools", e) from e
        missing = [name for name in self.server.tools if name not in listed]
        if missing:
            raise ConfigError(
                f"AgentTool {self.agent_tool}: spec.mcp.tools names {', '.join(missing)}, which the MCP server does not list "
                f"(it lists {', '.join(sorted(listed)) or 'none'})"
            )
        return [self._describe(listed[name]) for name in self.server.tools]

    def _describe(self, tool: Any) -> McpTool:
        execution = getattr(tool, "execution", None)
        if execution is not None and getattr(execution, "task_support", None) == "required":
            raise ConfigError(
                f"AgentTool {self.agent_tool}: MCP tool {tool.name} requires task execution (MCP tasks), which Tether "
                "does not support yet (the mcp SDK 2.3 has no client for it)"
            )
        hints = tool.annotations
        read_only = bool(hints and hints.read_only_hint)
        destructive = not read_only and (hints is None or hints.destructive_hint is not False)
        definition = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
        return McpTool(
            name=tool.name,
            description=tool.description or "",
            input_schema=dict(tool.input_schema or {}),
            read_only=read_only,
            destructive=destructive,
            idempotent=bool(hints and hints.idempotent_hint),
            code=hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:16],
        )

    async def call(self, tool: str, arguments: dict[str, Any], idempotency_key: str | None) -> Any:
        """One ``tools/call``: the result as JSON, :class:`McpToolError` for the server's error
        answer, :class:`ToolRunnerUnavailable` when the server could not be asked."""
        if tool not in self.server.tools:  # the runner trusts its caller, but not beyond the allowlist
            raise McpToolError(f"MCP tool {tool} is not in spec.mcp.tools of AgentTool {self.agent_tool}")
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, REQUEST_TIMEOUT

        meta = {IDEMPOTENCY_META: idempotency_key} if idempotency_key else None
        for fresh in (False, True):
            held = await self._session(fresh)
            try:
                result = await held.client.call_tool(tool, arguments, meta=meta)
                break
            except ConfigError:
                raise
            except Exception as e:
                cause = _unwrapped(e)
                # The SDK's transports speak HTTP failures (any error status: INTERNAL_ERROR; a lost
                # session: INVALID_REQUEST), a dropped connection and a timeout as JSON-RPC errors
                # too: none is the tool's answer. Any other JSON-RPC error is (a server's
                # METHOD_NOT_FOUND, INVALID_PARAMS, its own codes): recorded, shown to the model.
                if isinstance(cause, MCPError) and cause.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT, INTERNAL_ERROR, INVALID_REQUEST):
                    raise McpToolError(f"{cause.message} (JSON-RPC error {cause.code})") from None
                held.stop.set()  # a session that failed is not used again
                if fresh or held.age() < 1.0:
                    raise self._unavailable(f"calling {tool}", e) from e
                # A session held a while (expired, the server restarted): once more on a new one,
                # as the next attempt would, under the same idempotency key.
        if result.is_error:
            raise McpToolError(_text(result.content) or "the MCP server reported an error")
        if not result.content and result.structured_content is not None:
            return result.structured_content
        return _text(result.content)  # what the server wrote for a model (its structured form may wrap it)

    async def _session(self, fresh: bool) -> _Held:
        """The session calls share on this event loop, opened on first use (and again after one
        failed or on another loop); its failure to open is the server's unavailability."""
        loop = asyncio.get_running_loop()
        held = self._held
        if fresh or held is None or held.loop is not loop or held.stop.is_set() or held.task.done():
            held = self._held = _Held(loop)
            held.task = loop.create_task(self._hold(held))
        await held.ready.wait()
        if held.error is not None:
            self._held = None
            if isinstance(held.error, ConfigError):
                raise held.error
            raise self._unavailable("opening a session", held.error)
        return held

    async def _hold(self, held: _Held) -> None:
        try:
            async with self._client() as client:
                held.client, held.opened = client, time.monotonic()
                held.ready.set()
                await held.stop.wait()
        except Exception as e:  # opening failed, or the transport broke under a held session
            if not held.ready.is_set():
                held.error = e
        finally:
            held.stop.set()
            held.ready.set()

    def _unavailable(self, doing: str, e: BaseException) -> ToolRunnerUnavailable:
        e = _unwrapped(e)
        return ToolRunnerUnavailable(f"MCP server of AgentTool {self.agent_tool} ({self._where()}) failed {doing}: {type(e).__name__}: {e}")


def _unwrapped(e: BaseException) -> BaseException:
    """The one exception inside anyio's task-group wrappers."""
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    return e


def _text(content: list[Any]) -> Any:
    """Text blocks as one text; anything else (images, resources) as the blocks' JSON."""
    if all(getattr(block, "type", None) == "text" for block in content):
        return "\n".join(block.text for block in content)
    return [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in content]


def parameters(tool: McpTool) -> list[dict[str, Any]]:
    """The tool's input schema as :func:`tether.toolrunner.stand_in` parameters: each property
    with its :func:`python_type`, required ones first (a Python signature needs them before those
    with defaults), optional ones defaulting to their schema default, else None (and left out of
    the call: :func:`without_unset`)."""
    properties: dict[str, Any] = dict(tool.input_schema.get("properties") or {})
    if odd := [name for name in properties if not name.isidentifier() or keyword.iskeyword(name)]:
        raise ConfigError(f"MCP tool {tool.name}: parameter names that are not Python identifiers are not supported: {', '.join(odd)}")
    required = [name for name in tool.input_schema.get("required") or [] if name in properties]
    params: list[dict[str, Any]] = [
        {"name": name, "schema": properties[name], "annotation": python_type(properties[name], f"{tool.name}_{name}")} for name in required
    ]
    for name, schema in properties.items():
        if name not in required:
            annotation = python_type(schema, f"{tool.name}_{name}")
            if isinstance(schema, dict) and schema.get("default") is not None:  # the server's own default stands in
                params.append({"name": name, "schema": schema, "annotation": annotation, "default": schema["default"]})
            else:
                params.append({"name": name, "schema": schema, "annotation": annotation | None, "default": None})
    return params


_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool}


def python_type(schema: Any, name: str, depth: int = 0) -> Any:
    """A Python type for a JSON schema, for a framework to derive the tool's schema from again:
    scalars, enums (Literal), arrays (list[...]) and objects with properties (a pydantic model
    that forbids other keys, so strict schemas such as OpenAI's accept it), with descriptions;
    anything else (free-form objects, anyOf, $ref) is Any."""
    if not isinstance(schema, dict) or depth > 8:
        return Any
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the model may leave it out
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, (str, int, bool)) for v in enum):
        found: Any = Literal[tuple(enum)]
    elif kind in _SCALARS:
        found = _SCALARS[kind]
    elif kind == "array":
        found = list[python_type(schema.get("items"), f"{name}_item", depth + 1)]  # type: ignore[misc]
    elif kind == "object" and isinstance(schema.get("properties"), dict) and schema["properties"]:
        properties: dict[str, Any] = schema["properties"]
        if any(not k.isidentifier() or keyword.iskeyword(k) or k.startswith("_") for k in properties):
            return Any
        required = set(schema.get("required") or [])
        fields: dict[str, Any] = {}
        for key, sub in properties.items():
            typ = python_type(sub, f"{name}_{key}", depth + 1)
            fields[key] = (typ, ...) if key in required else (typ | None, None)
        found = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
    else:
        return Any
    description = schema.get("description")
    return Annotated[found, Field(description=description)] if isinstance(description, str) and description else found


def plain(value: Any) -> Any:
    """Arguments as the JSON the server takes: models the framework built from :func:`python_type`
    back to objects, without their unset optional keys."""
    if isinstance(value, BaseModel):
        return plain(value.model_dump(mode="json", exclude_none=True))
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def without_unset(tool: McpTool, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments to send: an optional parameter the framework filled with None is left out
    (the stand-in's default, not the model's value)."""
    required = set(tool.input_schema.get("required") or [])
    return {k: plain(v) for k, v in arguments.items() if v is not None or k in required}
