"""The upstream client of the wire seam: how a request reaches the provider and what of its
answer comes back.

One HTTP client per event loop (its connections are that loop's transports), requests sent as
streams, the caller's own timeouts applied, transport failures turned into
``RecoverableStepError`` (the SDK retries, or the attempt fails and the next one asks again).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import ssl
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..errors import RecoverableStepError
from .messages import WireRequest, WireResponse

#: Response headers kept in a record and replayed; everything else is transport or per-call noise.
KEPT_RESPONSE_HEADERS = ("content-type",)
KEPT_RAW_HEADERS = frozenset(h.encode() for h in KEPT_RESPONSE_HEADERS)
#: Response headers never passed through (hop-by-hop, or no longer true once httpx decoded the body).
DROPPED_RESPONSE_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "set-cookie"})
#: Request headers never forwarded upstream (hop-by-hop, or recomputed by httpx).
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding", "upgrade", "te"})


@functools.cache
def upstream_http() -> Any:
    """The HTTP library the seam calls providers with: ``httpx2`` where installed (the fork the
    openai and anthropic SDKs now ship; measured in benchmarks/record_overhead.py, its connection
    layer hands a streamed answer back ~1.5 ms sooner than httpx's), else ``httpx``. Same API;
    imported on the first live call, never at start-up."""
    try:
        return importlib.import_module("httpx2")
    except ImportError:
        return httpx


def transport_errors() -> tuple[type[Exception], ...]:
    """What a broken connection raises, in httpx and in the library :func:`upstream_http` chose."""
    return (httpx.TransportError, upstream_http().TransportError)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The CA bundle, loaded once per process (~0.1-0.2 s a load) for every run's upstream client."""
    return httpx.create_ssl_context()


def shown_url(url: str) -> str:
    """A URL fit for an error message: no user:password@, no query (where keys travel)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _caller_timeout(timeout: dict[str, float | None] | None) -> httpx.Timeout | None:
    """The caller's httpx timeout extension as a ``Timeout``; None when absent or not understood."""
    try:
        return upstream_http().Timeout(**timeout) if timeout else None
    except TypeError:
        return None


def kept_headers(response: httpx.Response) -> list[tuple[str, str]]:
    """The response headers a record keeps and a replay hands back."""
    # From the raw pairs: httpx decodes every header on each lookup (~0.1 ms a turn).
    return [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in response.headers.raw if k.lower() in KEPT_RAW_HEADERS]


def passthrough_headers(response: httpx.Response) -> list[tuple[str, str]]:
    """Unrecorded responses keep the provider's headers (retry-after, x-should-retry...), so
    the SDK's own retry logic sees what it would without Tether."""
    return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in DROPPED_RESPONSE_HEADERS]


async def drain(response: httpx.Response) -> AsyncIterator[bytes]:
    """An unrecorded answer's body, passed through as it arrives."""
    try:
        async for chunk in response.aiter_bytes():
            yield chunk
    except transport_errors() as e:
        raise RecoverableStepError(f"upstream stream broke: {type(e).__name__}") from e
    finally:
        await response.aclose()


async def read_whole(response: httpx.Response, what: str) -> bytes:
    """A body read to its end (``what`` names it in the error when the connection breaks)."""
    try:
        return await response.aread()
    except transport_errors() as e:
        raise RecoverableStepError(f"{what} broke: {type(e).__name__}") from e
    finally:
        await response.aclose()


def passed_through(response: httpx.Response) -> WireResponse:
    """An answer handed back unrecorded, headers and all."""
    return WireResponse(response.status_code, passthrough_headers(response), drain(response))


class Upstream:
    """The HTTP clients one seam calls providers with, one per event loop it is used on."""

    def __init__(self, timeout: float = 600.0) -> None:
        self.timeout = timeout
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            http = upstream_http()
            timeout = http.Timeout(self.timeout, connect=30.0)
            client = self._clients[loop] = http.AsyncClient(timeout=timeout, follow_redirects=False, verify=tls_context())
        return client

    async def send(self, request: WireRequest) -> httpx.Response:
        """Send ``request`` upstream; the answer's body is read by the caller (a stream)."""
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_HEADERS]
        url = request.url + (f"?{request.query}" if request.query else "")
        client = self._client()
        timeout = _caller_timeout(request.timeout)
        try:
            built = client.build_request(request.method, url, headers=headers, content=request.body, timeout=timeout or client.timeout)
            return await client.send(built, stream=True)
        except transport_errors() as e:
            raise RecoverableStepError(f"{request.provider} upstream unreachable at {shown_url(request.url)}: {type(e).__name__}") from e

    async def forward(self, request: WireRequest) -> WireResponse:
        """Not a model turn (or one no protocol understands): sent and handed back unrecorded."""
        return passed_through(await self.send(request))

    async def aclose(self) -> None:
        here = asyncio.get_running_loop()
        for loop, client in list(self._clients.items()):
            # Each client on its own loop: its connections are that loop's transports (closing them
            # from another thread raced the wire loop's own close of a cancelled stream).
            try:
                if loop is here:
                    await client.aclose()
                elif loop.is_running():
                    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(client.aclose(), loop))
            except RuntimeError:  # its loop is gone (and its connections with it)
                pass
        self._clients.clear()
