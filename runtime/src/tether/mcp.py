"""MCP at the wire: a framework's own MCP client, journaled (README.md, "MCP servers").

Point the framework's MCP client at Tether with one line, whatever the framework:

    url = tether.mcp_url("https://mcp.shop.example/mcp", name="shop")       # Streamable HTTP
    params = tether.mcp_stdio("npx", ["-y", "some-mcp-server"], name="fs")   # stdio: {"command", "args"}
    tether.mcp_http_client                                                  # optional: a Python client's HTTP, in process

Streamable HTTP requests reach the loopback proxy (``tether.wire.proxy``), or, from a client built
on :func:`mcp_http_client`, a transport in the client's own task; both hand them to :func:`handle`.
A stdio server is launched by ``tether mcp-relay`` (``tether.commands.mcp_relay``), which the
framework starts in the server's place and which sends the client's requests through the proxy.

    tools/call      → a tool step of the run through the tool seam (``tether.tools.call_tool``):
                      keyed by server name, tool name and canonical arguments (never the JSON-RPC
                      id, the session id or ``_meta``, where progress tokens live); replayed after it
                      was recorded, never sent again; a JSON-RPC error or an ``isError`` result is
                      the tool's answer: recorded, and handed to the client (and so the model) on
                      replay too; statuses a model turn would not record either (401/403/404/405,
                      408/409/429, 5xx) and broken connections are not recorded: the next attempt
                      calls again, with the same idempotency key in ``_meta``. Approvals as for an
                      AgentTool with ``mcp`` (:class:`Policy`): a call that needs a decision is not
                      sent; the run is suspended (``Run.suspend``). The server's notifications
                      before its answer reach the client as they come.
    tools/list      → forwarded unrecorded; its tools' annotations say which are destructive
    anything else   → forwarded unrecorded: ``initialize``, other reads, notifications, the
                      client's answers to the server, GET streams, DELETE

The reads are not recorded: a session must be opened live anyway (its id is the server's), and a
changed tool list changes the model turns that offer it, which then miss and run live (the first
divergence is reported), never replay an old answer to a new question.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import importlib.metadata
import json
import re
import sys
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .canonical import canonical_json
from .errors import Interrupted, RecoverableStepError, Suspended, ToolError
from .run import Run, current_run
from .tools import ToolFailed, ToolSpec, call_tool, idempotency_key
from .wire.messages import WireRequest, WireResponse, classify
from .wire.protocols.base import sse_data
from .wire.seam import WireSeam
from .wire.upstream import Upstream, passed_through, passthrough_headers, read_whole, transport_errors

if TYPE_CHECKING:
    import httpx

    from .wire.proxy import WireProxy

#: The ``_meta`` key a tools/call carries its idempotency key under (stable across attempts: a
#: server that saw it once can answer a retried call without doing it again).
IDEMPOTENCY_META = "tether.dev/idempotency-key"
#: How the two kinds of tool answer that are errors are recorded (the error's type in the journal).
RPC_ERROR, TOOL_ERROR = "JSONRPCError", "MCPToolError"

_RELAY = "http://relay.invalid/"  # mcp_stdio's placeholder: the relay appends its own URL
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
#: Set once a URL that follows the active run was handed out: from then on every run of this
#: process is served by the proxy (``tether.agent.runner`` registers it), so requests find it.
_follows_active = False
_plain: Upstream | None = None


@dataclass(frozen=True)
class Policy:
    """When a server's tools/call asks a human first (the policy of an AgentTool with ``mcp``)."""

    #: Every call: ``True``, a prompt template (``"Charge {amount} to {customer}?"``) or a callable,
    #: as a Tether tool's ``approval``.
    approval: Any = None
    #: A tool the server marks destructive (``destructiveHint`` true or absent, ``readOnlyHint`` not
    #: true: MCP's defaults) asks too.
    destructive_needs_approval: bool = True

    def approval_for(self, server: str, tool: str, destructive: bool) -> Any:
        if self.approval is not None and self.approval is not False:
            return self.approval
        if destructive and self.destructive_needs_approval:
            return f"Call {tool} of MCP server {server}, which it marks destructive?"
        return None


#: Each server name's policy (the last mcp_url/mcp_stdio for the name sets it).
_policies: dict[str, Policy] = {}
#: What each run learnt of each server's tools from the tools/list answers it carried:
#: (server, tool) → destructive. A tool it never saw listed is destructive (MCP's default).
_destructive: weakref.WeakKeyDictionary[WireSeam, dict[tuple[str, str], bool]] = weakref.WeakKeyDictionary()


def _proxy() -> WireProxy:
    from .wire.proxy import shared_proxy  # here: a run without MCP never needs the proxy started

    proxy = shared_proxy()
    proxy.mcp = handle
    return proxy


def server_name(url: str, name: str | None) -> str:
    """``name``, checked, or one made of the URL's host and path. The name is part of every tool
    step's key: it must stay the same across attempts (a port that changes would miss the journal)."""
    if name is None:
        parts = urlsplit(url)
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{parts.netloc}{parts.path}").strip("-.")
    if not _NAME.match(name):
        raise ValueError(f"MCP server name {name!r}: letters, digits, '.', '_' and '-' only (at most 100)")
    return name


def mcp_url(url: str, name: str | None = None, *, approval: Any = None, destructive_needs_approval: bool = True) -> str:
    """The URL to give a framework's Streamable HTTP MCP client for the server at ``url``.

    Called inside a run (an agent factory), the URL is that run's; called before any run (an
    agent built at import), it follows the run active in this process when a request arrives
    (none: requests go to the server unjournaled; several at once: refused, 409).

    Approvals (:class:`Policy`): ``approval`` asks a human before every call of the server's
    tools; a tool the server marks destructive asks unless ``destructive_needs_approval=False``.
    """
    global _follows_active
    name = server_name(url, name)
    if not url.startswith(("http://", "https://")) and url != _RELAY:
        raise ValueError(f"MCP server {name}: {url!r} is not an http(s) URL (a stdio server: tether.mcp_stdio)")
    if not isinstance(destructive_needs_approval, bool):
        raise ValueError(f"MCP server {name}: destructive_needs_approval must be True or False, not {destructive_needs_approval!r}")
    _policies[name] = Policy(approval, destructive_needs_approval)
    run = current_run()
    if run is None:
        _follows_active = True
    return _proxy().mcp_url(run, name, url)


def mcp_stdio(
    command: str, args: list[str] | tuple[str, ...] = (), *, name: str, approval: Any = None, destructive_needs_approval: bool = True
) -> dict[str, Any]:
    """``{"command": ..., "args": [...]}`` that launches the stdio MCP server ``command args``
    behind ``tether mcp-relay``: give it to the framework in the server's place. ``name`` keys
    the server's tool steps (a command such as ``npx`` names no server). Approvals as :func:`mcp_url`'s."""
    name = server_name(command, name)
    base = mcp_url(_RELAY, name, approval=approval, destructive_needs_approval=destructive_needs_approval).rsplit("/", 1)[0]
    return {"command": sys.executable, "args": ["-m", "tether", "mcp-relay", "--via", base, "--", command, *args]}


def mcp_http_client(headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None) -> Any:
    """An HTTP client for a Python MCP client: requests to the URLs :func:`mcp_url` hands out are
    served in this process, in the client's own task, instead of through the proxy's loopback
    server (the journal is the same; the hop cost ~1 ms a call: benchmarks/mcp_overhead.py); any
    other URL goes out as usual. Its signature is the ``mcp`` SDK's ``httpx_client_factory``, so
    pass the function where a framework takes a factory, or call it where it takes a client. An
    ``httpx2`` client under ``mcp`` 2.x, an ``httpx`` one under 1.x (each SDK's own)."""
    from .wire.transport import routed_transport_for

    _proxy()  # the handler is mounted before the first request
    http: Any = importlib.import_module(_sdk_http())
    return http.AsyncClient(
        transport=routed_transport_for(http)(_in_process),
        headers=headers,
        timeout=timeout if timeout is not None else http.Timeout(30.0, read=300.0),  # the SDK's defaults
        auth=auth,
    )


async def _in_process(request: Any) -> WireResponse | None:
    """A request of :func:`mcp_http_client`'s, served here as the proxy would serve it; None: a
    URL that is not the proxy's for an MCP server goes out as usual."""
    from .wire.proxy import McpRefused, mcp_route

    route = mcp_route(request.url.host, request.url.port, request.url.path)
    if route is None:
        return None
    token, server, segment = route
    try:
        seam, url, query = _proxy().mcp_target(token, segment)
    except McpRefused as e:
        body = json.dumps({"error": {"message": str(e), "type": "tether_proxy"}}).encode()
        return WireResponse.whole(e.status, [("content-type", "application/json")], body)
    timeout = request.extensions.get("timeout")
    wire = WireRequest(
        method=request.method,
        provider="mcp",
        path="",
        url=url,
        query="&".join(q for q in (query, request.url.query.decode()) if q),
        headers=list(request.headers.multi_items()),
        body=await request.aread(),
        timeout=dict(timeout) if isinstance(timeout, dict) else None,
    )
    return await handle(seam, server, wire)


@functools.cache
def _sdk_http() -> str:
    """The httpx flavour the installed ``mcp`` SDK builds its clients with."""
    try:
        major = int(importlib.metadata.version("mcp").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        major = 2
    return "httpx2" if major >= 2 else "httpx"


def follows_active() -> bool:
    """Whether this process handed out an MCP URL that follows the active run."""
    return _follows_active


def serve(run: Run) -> None:
    """Serve ``run`` on the proxy, so MCP URLs that follow the active run find it."""
    _proxy().register(run)


# -- one request -----------------------------------------------------------------------------------


class _Unanswered(RecoverableStepError):
    """The server answered a tools/call with an HTTP error (e.g. 404, its session expired): handed
    back as it is, so the client does what it would without Tether; not recorded."""

    def __init__(self, response: WireResponse) -> None:
        super().__init__(f"MCP server answered HTTP {response.status}")
        self.response = response


def _rpc_request(request: WireRequest) -> dict[str, Any] | None:
    """The JSON-RPC request (a method and an id) in ``request``, or None."""
    if request.method != "POST":
        return None
    try:
        message = request.json
    except ValueError:
        return None
    if not isinstance(message, dict) or not isinstance(message.get("method"), str) or "id" not in message:
        return None
    return message


def _named(message: dict[str, Any]) -> bool:
    """Whether a tools/call names its tool (one that does not is the server's to refuse)."""
    params = message.get("params")
    return isinstance(params, dict) and isinstance(params.get("name"), str)


async def _listing(seam: WireSeam, upstream: Upstream, server: str, request: WireRequest, message: dict[str, Any]) -> WireResponse:
    """A tools/list, forwarded unrecorded; the tools' annotations in its answer say which calls
    the server's policy asks a human about."""
    response = await upstream.send(request)
    body = await read_whole(response, f"MCP server {server}'s tool list")
    _learn(seam, server, answer_of(body, response.headers.get("content-type", ""), message["id"]))
    return WireResponse.whole(response.status_code, passthrough_headers(response), body)


def _learn(seam: WireSeam, server: str, answer: dict[str, Any] | None) -> str | None:
    """Which of the listed tools are destructive (MCP's defaults); returns the next page's cursor."""
    result = answer.get("result") if answer is not None else None
    tools = result.get("tools") if isinstance(result, dict) else None
    learnt = _destructive.setdefault(seam, {})
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            hints = tool.get("annotations")
            hints = hints if isinstance(hints, dict) else {}
            learnt[(server, tool["name"])] = hints.get("readOnlyHint") is not True and hints.get("destructiveHint") is not False
    cursor = result.get("nextCursor") if isinstance(result, dict) else None
    return cursor if isinstance(cursor, str) and cursor else None


async def _destructive_tool(seam: WireSeam, upstream: Upstream, server: str, request: WireRequest, message: dict[str, Any]) -> bool:
    """Whether the server marks the called tool destructive: from a tools/list this run carried,
    else from one sent now in the client's session (a client may call before it lists: the
    ``mcp`` SDK's does); a tool the server does not list, or a list that fails, counts as destructive."""
    key = (server, message["params"]["name"])
    if key not in _destructive.get(seam, {}):
        # The call's session and protocol headers, as a tools/list (the 2026 protocol names the method in a header).
        headers = [(k, v) for k, v in request.headers if k.lower() not in ("mcp-method", "mcp-name")]
        if len(headers) < len(request.headers):
            headers.append(("mcp-method", "tools/list"))
        meta = {k: v for k, v in (message["params"].get("_meta") or {}).items() if k != "progressToken"}
        cursor: str | None = None
        for page in range(20):
            params: dict[str, Any] = {**({"cursor": cursor} if cursor else {}), **({"_meta": meta} if meta else {})}
            listing = {"jsonrpc": "2.0", "id": f"tether-tools-{page}", "method": "tools/list", "params": params}
            try:
                response = await upstream.send(dataclasses.replace(request, headers=headers, body=json.dumps(listing).encode()))
                body = await read_whole(response, f"MCP server {server}'s tool list")
            except RecoverableStepError:
                break
            if classify(response.status_code) != "success":
                break
            cursor = _learn(seam, server, answer_of(body, response.headers.get("content-type", ""), listing["id"]))
            if cursor is None:
                break
    return _destructive.get(seam, {}).get(key, True)


def _rpc(message_id: Any, payload: dict[str, Any], status: int = 200) -> WireResponse:
    body = json.dumps({"jsonrpc": "2.0", "id": message_id, **payload}).encode()
    return WireResponse.whole(status, [("content-type", "application/json")], body)


def answer_of(body: bytes, content_type: str, message_id: Any) -> dict[str, Any] | None:
    """The JSON-RPC response to ``message_id`` in a server's answer (JSON, or an event stream that
    may carry notifications before it)."""
    if content_type.startswith("text/event-stream"):
        messages: list[Any] = list(sse_data(body))
    else:
        try:
            parsed = json.loads(body)
        except ValueError:
            return None
        messages = parsed if isinstance(parsed, list) else [parsed]
    return next(
        (
            m
            for m in messages
            if isinstance(m, dict) and m.get("id") == message_id and ("result" in m or "error" in m) and "method" not in m
        ),
        None,
    )


async def handle(seam: WireSeam | None, server: str, request: WireRequest) -> WireResponse:
    """One request of a framework's MCP client to ``server`` (see the module's docstring)."""
    global _plain
    if seam is None:
        _plain = _plain or Upstream()
    upstream = seam.upstream if seam is not None else _plain
    assert upstream is not None
    message = _rpc_request(request)
    if message is not None and message["method"] == "tools/list" and seam is not None:
        return await _listing(seam, upstream, server, request, message)
    if message is not None and message["method"] in _TASK_METHODS and seam is not None:
        request = _to_task_session(seam, server, request, message)
    message = message if message is not None and message["method"] == "tools/call" and _named(message) else None
    if message is None or seam is None:
        return await upstream.forward(request)
    if not isinstance(message["params"].get("arguments") or {}, dict):
        return _rpc(message["id"], {"error": {"code": -32602, "message": "tools/call arguments must be an object"}})
    # The server's notifications before its answer (progress) reach the client as they come: once
    # one arrives, the client is answered with an event stream that ends with the call's answer.
    early: asyncio.Queue[bytes] = asyncio.Queue()
    notified: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def notify(event: bytes) -> None:
        early.put_nowait(event)
        if not notified.done():
            notified.set_result(None)

    call = asyncio.ensure_future(_journaled_call(seam, upstream, server, request, message, notify))
    # (A call left running when the client hangs up ends, and is recorded, on its own.)
    either: set[asyncio.Future[Any]] = {call, notified}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if call.done():
        return call.result()
    return WireResponse(200, [("content-type", "text/event-stream"), ("cache-control", "no-cache")], _events(early, call))


async def _events(early: asyncio.Queue[bytes], call: asyncio.Future[WireResponse]) -> AsyncIterator[bytes]:
    """The server's notifications as they come, then the call's answer as the last event."""
    while True:
        getting = asyncio.ensure_future(early.get())
        either: set[asyncio.Future[Any]] = {getting, call}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if not getting.done():
            getting.cancel()
            break
        yield getting.result()
    while not early.empty():
        yield early.get_nowait()
    answer = call.result()  # a RecoverableStepError breaks the stream: the client sees a failed call
    yield b"event: message\ndata: " + (answer.body or b"") + b"\n\n"


async def _journaled_call(
    seam: WireSeam, upstream: Upstream, server: str, request: WireRequest, message: dict[str, Any], notify: Callable[[bytes], None]
) -> WireResponse:
    params: dict[str, Any] = message["params"]
    arguments = params.get("arguments") or {}

    async def live(**_: Any) -> Any:
        # The call as the client sent it, its idempotency key added to _meta.
        meta = {**(params.get("_meta") or {}), IDEMPOTENCY_META: idempotency_key()}
        body = json.dumps({**message, "params": {**params, "_meta": meta}}).encode()
        response = await upstream.send(dataclasses.replace(request, body=body))
        status = response.status_code
        if classify(status) not in ("success", "terminal"):  # 404 (session gone), 401, 429, 5xx: not the tool's answer
            raise _Unanswered(passed_through(response))
        content_type = response.headers.get("content-type", "")
        if classify(status) == "success" and content_type.startswith("text/event-stream"):
            answer = await _answer_in_stream(response, server, message["id"], notify)
        else:
            answered = await read_whole(response, f"MCP server {server}'s answer")
            answer = answer_of(answered, content_type, message["id"])
        if answer is None and classify(status) == "success":
            raise RecoverableStepError(f"MCP server {server} answered tools/call {params['name']} with no JSON-RPC response")
        if answer is None:  # a 4xx that answers no request of ours (a transport-level refusal)
            raise _Unanswered(WireResponse.whole(status, passthrough_headers(response), answered))
        if "error" in answer:  # the server refused the call (its HTTP status kept: 400 in the 2026 protocol)
            raise ToolFailed(RPC_ERROR, canonical_json({"status": status, "error": answer["error"]}).decode())
        result = answer["result"]
        if isinstance(result, dict) and result.get("isError"):
            raise ToolFailed(TOOL_ERROR, canonical_json(result).decode())
        if tasked and _task_id(result) is not None:  # the task's handle: recorded with the session it lives in
            result = {**result, TASK_SESSION: _header(request, "mcp-session-id")}
        return result

    policy = _policies.get(server, Policy())
    asks = policy.approval is None or policy.approval is False
    destructive = asks and policy.destructive_needs_approval and await _destructive_tool(seam, upstream, server, request, message)
    approval = policy.approval_for(server, params["name"], destructive)
    # Not retryable in the tool's sense: a transport failure is simply not the tool's answer.
    # A task-augmented call answers with a task's handle, not the tool's result: its own step.
    tasked = isinstance(params.get("task"), dict)
    spec = ToolSpec(
        name=f"mcp:{server}/{params['name']}",
        fn=live,
        version="task" if tasked else "",
        code="mcp",
        retryable=(RecoverableStepError,),
        approval=approval,
    )
    try:
        result = await call_tool(spec, arguments, run=seam.attempt)
    except Suspended as e:
        # The run waits for a human: it ends now (tether.stopping.until_stopped), holding nothing;
        # the client's answer is a failure nobody acts on (the attempt starts nothing new).
        seam.attempt.suspend(e)
        return _rpc(message["id"], {"error": {"code": -32603, "message": f"tether: {e}"}}, status=503)
    except _Unanswered as e:
        return e.response
    except ToolError as e:
        if e.error_type == RPC_ERROR:
            refusal = json.loads(e.message)
            return _rpc(message["id"], {"error": refusal["error"]}, status=refusal["status"])
        if e.error_type == TOOL_ERROR:
            return _rpc(message["id"], {"result": json.loads(e.message)})
        return _rpc(message["id"], {"error": {"code": -32603, "message": str(e)}})  # not written by this module: never expected
    except Interrupted as e:  # the attempt is stopping: the call is not made (the client sees a failure, not an answer)
        return _rpc(message["id"], {"error": {"code": -32603, "message": f"tether: {e}"}}, status=503)
    if isinstance(result, str):  # a human declined the call (the seam's refusal): the tool's error, never sent
        # resultType: the 2026 protocol's clients require it; earlier ones take results with more keys.
        result = {"content": [{"type": "text", "text": result}], "isError": True, "resultType": "complete"}
    if isinstance(result, dict) and TASK_SESSION in result:
        result = dict(result)
        session = result.pop(TASK_SESSION)
        task_id = _task_id(result)
        if task_id is not None and isinstance(session, str):
            _task_sessions.setdefault(seam, {})[(server, task_id)] = session
    return _rpc(message["id"], {"result": result})


# -- MCP tasks (2025-11-25: task-augmented tools/call) ----------------------------------------------
#: Where a recorded task handle keeps the session its task lives in (taken out before the client sees it).
TASK_SESSION = "tether.dev/task-session"
_TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel"})
#: The tasks each run's journaled calls started or replayed: (server, task id) → the session it lives in.
_task_sessions: weakref.WeakKeyDictionary[WireSeam, dict[tuple[str, str], str]] = weakref.WeakKeyDictionary()


def _task_id(result: Any) -> str | None:
    task = result.get("task") if isinstance(result, dict) else None
    task_id = task.get("taskId") if isinstance(task, dict) else None
    return task_id if isinstance(task_id, str) else None


def _header(request: WireRequest, name: str) -> str | None:
    return next((v for k, v in request.headers if k.lower() == name), None)


def _to_task_session(seam: WireSeam, server: str, request: WireRequest, message: dict[str, Any]) -> WireRequest:
    """A poll of a task a journaled call started (in this attempt or, replayed, in an earlier one),
    sent in the session the task lives in: a server keeps tasks per session, and a resume opens
    a new one. Answers are not recorded: polling is a read (the task ran once, when it was called)."""
    params = message.get("params")
    task_id = params.get("taskId") if isinstance(params, dict) else None
    session = _task_sessions.get(seam, {}).get((server, task_id)) if isinstance(task_id, str) else None
    if session is None or session == _header(request, "mcp-session-id"):
        return request
    headers = [(k, v) for k, v in request.headers if k.lower() != "mcp-session-id"] + [("mcp-session-id", session)]
    return dataclasses.replace(request, headers=headers)


#: Event streams still being read to their end after their answer was handed on (see below).
_tails: set[asyncio.Future[None]] = set()


async def _answer_in_stream(
    response: httpx.Response, server: str, message_id: Any, notify: Callable[[bytes], None]
) -> dict[str, Any] | None:
    """The JSON-RPC response to ``message_id`` in an event stream, taken as soon as its event
    arrives (a server closes the stream a little later: waiting for that cost ~1 ms a call);
    the events before it are handed to ``notify`` as they come. The rest of the stream is read
    in the background, so the connection goes back to the pool."""
    chunks = response.aiter_bytes()
    buffer = b""
    try:
        async for chunk in chunks:
            buffer = (buffer + chunk).replace(b"\r\n", b"\n")
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                answer = answer_of(block, "text/event-stream", message_id)
                if answer is not None:
                    tail = asyncio.ensure_future(_read_rest(response, chunks))
                    _tails.add(tail)
                    tail.add_done_callback(_tails.discard)
                    return answer
                if block.strip():
                    notify(block + b"\n\n")
    except transport_errors() as e:
        await response.aclose()
        raise RecoverableStepError(f"MCP server {server}'s answer broke: {type(e).__name__}") from e
    except BaseException:
        await response.aclose()
        raise
    await response.aclose()
    return None


async def _read_rest(response: httpx.Response, chunks: AsyncIterator[bytes]) -> None:
    try:
        async for _ in chunks:
            pass
    except Exception:  # nobody reads it: a broken tail costs only its connection
        pass
    finally:
        await response.aclose()
