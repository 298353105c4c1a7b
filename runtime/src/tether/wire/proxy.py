"""The loopback recording proxy: the universal way into the wire seam (README.md, "How it works": Wire seam).

Any SDK, any language, a subprocess CLI: point its base URL at ``proxy.base_url(run, provider)``
(``http://127.0.0.1:PORT/r/<token>/<provider>``) and every request reaches the run's seam. The
token in the path keeps concurrent runs in one process apart. The proxy knows a run only by its
seam (``Wired``): it never reads or writes the run itself. Live requests go upstream with the
caller's own credentials; the proxy never stores or logs them.

MCP servers are reached the same way (``/r/<token>/mcp/<server>/<upstream URL, base64url>``): the
proxy only carries those requests; ``tether.mcp`` (a layer above, where tool steps are journaled)
mounts the handler that decides (:attr:`WireProxy.mcp`).
"""

from __future__ import annotations

import base64
import re
import secrets
import threading
from collections.abc import Awaitable, Callable

from ..errors import RecoverableStepError
from .httpserver import Request, Response, Server, json_response, serve
from .loop import run_on_wire_loop
from .messages import WireResponse
from .seam import Wired, WireRequest, WireSeam

#: What serves an MCP request: the run's seam (``None``: no run to journal in), the server's
#: name (part of every tool step's key) and the request, its URL the server's.
McpHandler = Callable[[WireSeam | None, str, WireRequest], Awaitable[WireResponse]]


def encode_upstream(url: str) -> str:
    """An upstream URL as one path segment (base64url, unpadded)."""
    return base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


_MCP_PATH = re.compile(r"^/r/([^/]+)/mcp/([^/]+)/([^/]+)$")


def mcp_route(host: str, port: int | None, path: str) -> tuple[str, str, str] | None:
    """``(token, server, upstream segment)`` of a URL this process's proxy hands out for an MCP
    server (:meth:`WireProxy.mcp_url`), or None: any other URL."""
    if _proxy is None or host != "127.0.0.1" or port != _proxy.port:
        return None
    found = _MCP_PATH.match(path)
    return (found[1], found[2], found[3]) if found else None


def decode_upstream(segment: str) -> str:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode()


class McpRefused(Exception):
    """An MCP request the proxy has no run or server for (its HTTP status: 404, 409)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class WireProxy:
    def __init__(self) -> None:
        self._seams: dict[str, WireSeam] = {}
        #: Mounted by ``tether.mcp`` on first use; until then MCP requests are refused (404).
        self.mcp: McpHandler | None = None
        self._server: Server | None = None
        self.port = 0

    # -- lifecycle (on the wire loop) ----------------------------------------------------------
    async def _start(self, host: str, port: int) -> None:
        # A caller that hangs up cancels its request here too (tether.wire.httpserver).
        self._server = await serve(self._route, host, port)
        self.port = self._server.port  # the port the OS picked

    def start(self, host: str = "127.0.0.1", port: int = 0) -> WireProxy:
        run_on_wire_loop(self._start(host, port))
        return self

    def stop(self) -> None:
        if self._server is not None:
            run_on_wire_loop(self._server.close())
            self._server = None

    # -- runs ----------------------------------------------------------------------------------
    def register(self, run: Wired) -> str:
        token = secrets.token_hex(8)
        self._seams[token] = run.seam
        run.seam.proxy_tokens.append(token)
        return token

    def unregister(self, run: Wired) -> None:
        for token in run.seam.proxy_tokens:
            self._seams.pop(token, None)

    def active_url(self, provider: str) -> str:
        """A base URL that follows whichever run is active in this process (``/r/active/``).

        For agents built before their run exists (a bring-your-own module whose SDK client read
        ``OPENAI_BASE_URL`` at import): requests go to the single registered run, and fail with
        a clear 409 when there is none or several.
        """
        return f"http://127.0.0.1:{self.port}/r/active/{provider}"

    def base_url(self, run: Wired, provider: str) -> str:
        """The base URL an SDK of ``provider`` should use (append the SDK's version segment)."""
        tokens = run.seam.proxy_tokens or [self.register(run)]
        return f"http://127.0.0.1:{self.port}/r/{tokens[0]}/{provider}"

    def mcp_url(self, run: Wired | None, server: str, upstream: str) -> str:
        """The URL an MCP client should use for the server at ``upstream``: ``run``'s, or (``None``)
        whichever run is active in this process when a request arrives, like :meth:`active_url`."""
        token = (run.seam.proxy_tokens or [self.register(run)])[0] if run is not None else "active"
        return f"http://127.0.0.1:{self.port}/r/{token}/mcp/{server}/{encode_upstream(upstream)}"

    # -- one request ---------------------------------------------------------------------------
    def _active(self) -> list[WireSeam]:
        return list({id(s): s for s in self._seams.values()}.values())

    async def _route(self, request: Request) -> Response:
        """``/r/<token>/mcp/<server>/<upstream>`` or ``/r/<token>/<provider>/<path>``."""
        parts = request.path.split("/", 4)  # "", "r", token, provider, rest
        if len(parts) < 4 or parts[:2] != ["", "r"]:
            return _error(404, "tether proxy: not a run's URL (/r/<token>/<provider>/...)")
        token, provider, rest = parts[2], parts[3], parts[4] if len(parts) == 5 else ""
        if provider == "mcp" and rest.count("/") == 1:
            server, encoded = rest.split("/")
            return await self._handle_mcp(request, token, server, encoded)
        return await self._handle(request, token, provider, rest)

    async def _handle(self, request: Request, token: str, provider: str, tail: str) -> Response:
        if token == "active":
            active = self._active()
            if len(active) != 1:
                return _error(409, f"tether proxy: /r/active/ needs exactly one active run in this process, found {len(active)}")
            token = next(k for k, s in self._seams.items() if s is active[0])
        seam = self._seams.get(token)
        if seam is None or provider not in seam.upstreams:
            return _error(404, "tether proxy: unknown run or provider")
        path = "/" + tail
        wire = WireRequest(
            method=request.method,
            provider=provider,
            path=path,
            url=seam.upstreams[provider] + path,
            query=request.query,
            headers=request.headers,
            body=request.body,
        )
        return await self._answer(seam.handle(wire))

    def mcp_target(self, token: str, segment: str) -> tuple[WireSeam | None, str, str]:
        """The run (``None``: no run to journal in) and the server's URL and query an MCP request
        under ``/r/<token>/mcp/<server>/<segment>`` is for; :class:`McpRefused` when there is none."""
        seam: WireSeam | None
        if token == "active":
            active = self._active()
            if len(active) > 1:
                raise McpRefused(409, f"tether proxy: /r/active/ needs at most one active run in this process, found {len(active)}")
            seam = active[0] if active else None
        else:
            seam = self._seams.get(token)
            if seam is None:
                raise McpRefused(404, "tether proxy: unknown run")
        try:
            upstream = decode_upstream(segment)
        except ValueError:
            raise McpRefused(404, "tether proxy: malformed MCP server URL") from None
        if self.mcp is None:
            raise McpRefused(404, "tether proxy: MCP is not mounted")
        url, _, query = upstream.partition("?")
        return seam, url, query

    async def _handle_mcp(self, request: Request, token: str, server: str, encoded: str) -> Response:
        """An MCP server's request. With no run active (an MCP client that connects before its run
        starts) the handler forwards it unjournaled, as a tool called outside a run just runs."""
        try:
            seam, url, query = self.mcp_target(token, encoded)
        except McpRefused as e:
            return _error(e.status, str(e))
        assert self.mcp is not None
        wire = WireRequest(
            method=request.method,
            provider="mcp",
            path="",
            url=url,
            query="&".join(q for q in (query, request.query) if q),
            headers=request.headers,
            body=request.body,
        )
        return await self._answer(self.mcp(seam, server, wire))

    async def _answer(self, answering: Awaitable[WireResponse]) -> Response:
        try:
            response = await answering
        except RecoverableStepError as e:
            # 502 is recoverable for every SDK: it retries or fails the attempt, never records.
            return json_response({"error": {"message": f"tether proxy: {e}", "type": "tether_upstream"}}, 502)
        streamed = any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in response.headers)
        if response.body is not None and not streamed:
            return Response(response.status, response.headers, response.body)  # one write, with its length
        # A stream that breaks cuts the connection: the caller must see a failed stream, never a short one.
        return Response(response.status, response.headers, stream=response.stream, broken=(RecoverableStepError,))


def _error(status: int, message: str) -> Response:
    return json_response({"error": {"message": message, "type": "tether_proxy"}}, status)


_proxy: WireProxy | None = None
_proxy_lock = threading.Lock()


def shared_proxy() -> WireProxy:
    """The process's proxy, started on first use on a free loopback port."""
    global _proxy
    with _proxy_lock:
        if _proxy is None:
            _proxy = WireProxy().start()
        return _proxy
