"""The tool runner: an AgentTool's calls served by a process of its own, the only one holding
that tool's secrets (``tether tool-runner``).

    agent process (tether exec)                       tool runner (tether tool-runner --tool NAME)
    framework, journal, approvals, cache,             imports only NAME's implementation, reads
    idempotency key: tether.tools.call_tool           only NAME's secrets, runs one call per
      -> Tool._execute -> RunnerClient  --- Unix socket --->  connection and answers

Only the execution moves. Everything around a call stays in the agent's seam
(:func:`tether.tools.call_tool`): a recorded call is replayed and never reaches the runner, an
approval is asked before it is sent, the cross-run cache is read and written by the agent, and the
idempotency key travels with the call (``tether.idempotency_key()`` inside the runner is the
agent's key). A tool's exception comes back as its type and message and is recorded exactly as
the same failure in-process would be (the model sees it as a tool error); a runner that cannot be
reached, or dies during a call, is :class:`~tether.errors.ToolRunnerUnavailable`: recoverable and
not recorded, so the next attempt sends the call again, under the same idempotency key.

The agent learns which tools run elsewhere from ``$TETHER_TOOL_RUNNERS`` (JSON ``{"<AgentTool>":
"<socket path>" or "tcp://<IP>:<PORT>"}``, set by the executor). Protocol: one connection per
call; each way one frame, a 4-byte big-endian length and a UTF-8 JSON document::

    call      {"tool": NAME, "arguments": {...}, "idempotencyKey": KEY or null, "mcpTool": MCP TOOL (an MCP AgentTool)}
    describe  {"op": "describe", "tool": NAME}   (answer: name, docstring, parameters, code hash;
              of an MCP AgentTool {"mcp": [the allowed tools' definitions]}: tether.mcptool)
    answer    {"ok": RESULT}  or  {"error": {"type": EXCEPTION CLASS NAME, "message": TEXT}}
              or  {"unavailable": TEXT} (an MCP server that did not answer: not the tool's failure)

A Unix socket is reachable from the runner's pod only (a shared emptyDir; no token). A runner on
TCP (``--listen``: a GPU tool's pod of its own, reached by its pod IP) is reachable by anything in
the cluster network, so each connection first sends ``{"token": T}``, the attempt's token
(``--token-file``; a frame of at most 1 KiB, so a stranger costs the runner nothing): without it,
or with another, the connection gets no answer and runs nothing. The agent reads the token of
tool NAME from ``$TETHER_TOOL_TOKENS/NAME`` (a Secret of the attempt that only the agent's
container and the tool's pod mount).

The agent imports a runner's tool itself when it can (for the signature its framework reads; the
function is never called there); a tool whose module exists only in the tool's own image is
described by its runner instead, and stands in the agent as a function of that signature
(annotations reduced to JSON types).

Inside the runner a tool reads its secrets as in-process (``tether.secret``, ``os.environ``
during its call); there is no run (``tether.current_run()`` is None): the journal is the agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import json
import os
import signal
import struct
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .api.shared import parse_duration
from .contract import RUNNERS_ENV as RUNNERS_ENV  # the operator sets them (tether.contract)
from .contract import TOKENS_ENV as TOKENS_ENV
from .errors import ConfigError, ToolRunnerUnavailable
from .mcptool import McpClient
from .tools import ToolFailed, ToolSpec, _idempotency_key, _invoke, code_hash, encode_result, idempotency_key

WAIT_ENV = "TETHER_TOOL_RUNNER_WAIT"
"""Seconds a call waits for its runner's socket to accept (a runner still starting, or restarting
after a crash) before the attempt fails recoverably; default 60."""
MAX_FRAME = 64 * 1024 * 1024
MAX_HELLO = 1024  # the token frame, read before the caller is known
HELLO_SECONDS = 3.0  # an agent sends its token as it connects; a silent stranger holds no connection open longer
_LENGTH = struct.Struct(">I")


def tool_runners(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``$TETHER_TOOL_RUNNERS``: the address (socket path or ``tcp://IP:PORT``) of each tool that
    runs in a tool runner."""
    raw = (os.environ if environ is None else environ).get(RUNNERS_ENV)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
        assert isinstance(doc, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items())
    except (ValueError, AssertionError):
        raise ConfigError(f"${RUNNERS_ENV} is not a JSON object of AgentTool name -> socket path or tcp://IP:PORT") from None
    return doc


async def _write(writer: asyncio.StreamWriter, doc: Any) -> None:
    data = encode_result(doc)
    writer.write(_LENGTH.pack(len(data)) + data)
    await writer.drain()


async def _read(reader: asyncio.StreamReader, limit: int = MAX_FRAME) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > limit:
        raise ValueError(f"frame of {length} bytes is over the limit ({limit})")
    return json.loads(await reader.readexactly(length))


# ---------------------------------------------------------------------------- the agent's side


class RunnerClient:
    """Calls of one AgentTool, sent to its runner's socket (what ``Tool._execute`` awaits)."""

    def __init__(self, tool: str, socket_path: str, wait: float | None = None) -> None:
        self.tool, self.socket_path = tool, socket_path
        self.wait = float(os.environ.get(WAIT_ENV) or 60.0) if wait is None else wait

    def token(self) -> str | None:
        """The tool's token, for a runner on TCP (read at each call: a file of the attempt's Secret)."""
        directory = os.environ.get(TOKENS_ENV)
        try:
            return Path(directory, self.tool).read_text().strip() if directory else None
        except OSError:
            return None

    async def call(self, arguments: dict[str, Any], mcp_tool: str | None = None) -> Any:
        reader, writer = await self._connect()
        frame = {"tool": self.tool, "arguments": arguments, "idempotencyKey": idempotency_key()}
        if mcp_tool is not None:
            frame["mcpTool"] = mcp_tool
        try:
            await _write(writer, frame)
            answer = await _read(reader)
        except (OSError, EOFError, ValueError) as e:  # IncompleteReadError is an EOFError
            raise ToolRunnerUnavailable(f"tool runner of {self.tool} ({self.socket_path}) failed during the call: {e!r}") from e
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if "unavailable" in answer:
            raise ToolRunnerUnavailable(str(answer["unavailable"]))
        if "error" in answer:
            error = answer["error"]
            raise ToolFailed(str(error.get("type") or "Exception"), str(error.get("message") or ""))
        return answer.get("ok")

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait
        while True:
            try:
                if not self.socket_path.startswith("tcp://"):
                    return await asyncio.open_unix_connection(self.socket_path)
                address = urlsplit(self.socket_path)
                reader, writer = await asyncio.open_connection(address.hostname, address.port)
                await _write(writer, {"token": self.token()})
                return reader, writer
            except (OSError, ValueError) as e:  # not there yet, or nobody listening: starting or restarting
                if loop.time() >= deadline:
                    raise ToolRunnerUnavailable(
                        f"tool runner of {self.tool} not reachable at {self.socket_path} after {self.wait:g}s: {e}"
                    ) from e
                await asyncio.sleep(0.05)


# ------------------------------------------------------------------------------ the runner


@dataclass
class Served:
    """One tool a runner serves: its function (or its MCP server's client) and its own secrets."""

    fn: Callable[..., Any] | None
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    mcp: McpClient | None = None


async def answer(tools: Mapping[str, Served], call: Any) -> dict[str, Any]:
    """The answer to one call: the tool's result as JSON, or its exception's type and message."""
    from .secrets import tool_scope

    name = call.get("tool") if isinstance(call, dict) else None
    served = tools.get(name) if isinstance(name, str) else None
    if served is None:
        return {"error": {"type": "ConfigError", "message": f"this tool runner serves {', '.join(sorted(tools))}, not {name!r}"}}
    arguments = call.get("arguments") or {}
    token = _idempotency_key.set(call.get("idempotencyKey"))
    try:
        if served.mcp is not None:
            if call.get("op") == "describe":
                return {"ok": {"mcp": [t.to_json() for t in await served.mcp.list_tools()]}}
            value = await served.mcp.call(str(call.get("mcpTool")), arguments, call.get("idempotencyKey"))
        elif served.fn is None:
            raise ConfigError(f"{name} has no implementation")
        elif call.get("op") == "describe":
            return {"ok": describe(served.fn)}
        else:
            with tool_scope(served.secrets):
                value = await _invoke(ToolSpec(str(name), served.fn, code="-"), arguments)
        return {"ok": json.loads(encode_result(value))}
    except ToolRunnerUnavailable as e:  # the MCP server did not answer: the agent's attempt fails recoverably
        return {"unavailable": str(e)}
    except Exception as e:  # the tool's failure: the agent's seam records it
        return {"error": {"type": type(e).__name__, "message": str(e)}}
    finally:
        _idempotency_key.reset(token)


def describe(fn: Callable[..., Any]) -> dict[str, Any]:
    """What the agent needs of a tool it cannot import (its module is only in the tool's image):
    its name, docstring, parameters (JSON schema of each annotation, defaults) and code hash."""
    import typing

    from pydantic import TypeAdapter

    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: described as any value
        hints = {}
    params: list[dict[str, Any]] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        schema: dict[str, Any] = {}
        if p.name in hints:
            with contextlib.suppress(Exception):
                schema = TypeAdapter(hints[p.name]).json_schema()
        entry: dict[str, Any] = {"name": p.name, "schema": schema}
        if p.default is not p.empty:
            entry["default"] = json.loads(encode_result(p.default))
        params.append(entry)
    return {"name": getattr(fn, "__name__", "tool"), "doc": inspect.getdoc(fn) or "", "params": params, "code": code_hash(fn)}


_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def stand_in(description: Mapping[str, Any]) -> Callable[..., Any]:
    """A function with the described name, docstring and signature (annotations from the JSON
    types: str, int, float, bool, list, dict, else Any; or a parameter's own ``annotation``) for
    the framework to read a schema from; never called: its calls go to the runner."""
    params, annotations = [], {}
    for p in description["params"]:
        annotation = p["annotation"] if "annotation" in p else _JSON_TYPES.get(str(p["schema"].get("type")), Any)
        default = p.get("default", inspect.Parameter.empty)
        params.append(inspect.Parameter(p["name"], inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation))
        annotations[p["name"]] = annotation

    def tool(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{description['name']} runs in its tool runner")

    tool.__name__ = tool.__qualname__ = description["name"]
    tool.__doc__ = description["doc"] or None
    tool.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    return tool


def describe_remote(tool: str, socket_path: str, wait: float | None = None) -> dict[str, Any]:
    """Ask a runner to :func:`describe` its tool (blocking: the agent builds its tools before it runs)."""

    async def ask() -> Any:
        client = RunnerClient(tool, socket_path, wait)
        reader, writer = await client._connect()
        try:
            await _write(writer, {"op": "describe", "tool": tool})
            return await _read(reader)
        except (OSError, EOFError, ValueError) as e:
            raise ToolRunnerUnavailable(f"tool runner of {tool} ({socket_path}) failed to describe it: {e!r}") from e
        finally:
            writer.close()

    answer = _in_own_loop(ask)
    if "unavailable" in answer:
        raise ToolRunnerUnavailable(str(answer["unavailable"]))
    if "error" in answer:
        raise ConfigError(f"AgentTool {tool}: its tool runner says {answer['error'].get('type')}: {answer['error'].get('message')}")
    return answer["ok"]  # type: ignore[no-any-return]


def _in_own_loop(coro: Callable[[], Any]) -> Any:
    """Run ``coro()`` to the end from sync code, even on a thread whose loop is running."""
    import threading

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = asyncio.run(coro())
        except BaseException as e:  # handed to the caller
            box["error"] = e

    thread = threading.Thread(target=work, name="tether-describe-tool")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def authentic(hello: Any, token: str | None) -> bool:
    """Whether a TCP connection's first frame carries ``token`` (compared in constant time)."""
    given = hello.get("token") if isinstance(hello, dict) else None
    return isinstance(given, str) and token is not None and hmac.compare_digest(given.encode(), token.encode())


async def serve(
    tools: Mapping[str, Served],
    socket_path: str | None = None,
    stop: asyncio.Event | None = None,
    *,
    listen: tuple[str, int] | None = None,
    token: str | None = None,
) -> None:
    """Serve calls of ``tools`` on ``socket_path``, or on TCP at ``listen`` (host, port) to callers
    holding ``token``, until ``stop`` is set (or SIGTERM)."""
    if listen is not None and not token:
        raise ConfigError("a tool runner on TCP needs a token")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if listen is not None and not authentic(await asyncio.wait_for(_read(reader, MAX_HELLO), HELLO_SECONDS), token):
                peer = writer.get_extra_info("peername")
                print(f"tether tool-runner: refused a connection from {peer} without the attempt's token", file=sys.stderr, flush=True)
                return  # no answer: the caller learns nothing, not even the tool's name
            await _write(writer, await answer(tools, await _read(reader)))
        except (OSError, EOFError, ValueError, TimeoutError):
            pass  # the agent went away (killed mid-call): its next attempt sends the call again
        finally:
            writer.close()

    stop = stop or asyncio.Event()
    path = Path(socket_path) if listen is None and socket_path else None
    if path is not None:
        path.unlink(missing_ok=True)  # left by a runner that died (a restarted sidecar)
        old = os.umask(0o077)  # only this user (the pod's runner UID) may connect
        try:
            server = await asyncio.start_unix_server(handle, path=str(path))
        finally:
            os.umask(old)
        where = str(path)
    elif listen is not None:
        server = await asyncio.start_server(handle, host=listen[0] or None, port=listen[1])
        where = f"TCP port {listen[1]} (callers with the attempt's token)"
    else:
        raise ConfigError("a tool runner needs a socket path or a TCP address")
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
        loop.add_signal_handler(signal.SIGTERM, stop.set)  # the pod ends: exit 0, not "killed"
    print(f"tether tool-runner: serving {', '.join(sorted(tools))} on {where}", file=sys.stderr, flush=True)
    async with server:
        await stop.wait()
    if path is not None:
        path.unlink(missing_ok=True)


def load_served(request_text: str, names: list[str], secrets: Any) -> dict[str, Served]:
    """The tools ``names`` of an exec request, each with its own secrets from ``secrets``."""
    from .agent import Tool
    from .contract import ExecRequest
    from .tools import allowed_tool_modules, import_tool

    request = ExecRequest.model_validate_json(request_text)
    allowed = allowed_tool_modules()
    served: dict[str, Served] = {}
    for name in names:
        spec = request.tools.get(name)
        if spec is None:
            raise ConfigError(f"AgentTool {name} is not in the request (its tools: {', '.join(sorted(request.tools)) or 'none'})")
        if spec.mcp is not None:  # no module to import: the runner is the server's MCP client
            own = secrets.tools.get(name, {})
            served[name] = Served(None, own, McpClient(name, spec.mcp, own, parse_duration(spec.timeout) if spec.timeout else None))
            continue
        assert spec.implementation is not None  # one of the two (tether.api)
        fn = import_tool(name, spec.implementation, allowed)
        served[name] = Served(fn.fn if isinstance(fn, Tool) else fn, secrets.tools.get(name, {}))
    return served
