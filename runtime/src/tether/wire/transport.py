"""In-process httpx transports: the fast way into the wire seam (README.md, "How it works": Wire seam).

Hand an SDK an httpx client built on one of these wherever the SDK accepts one (``http_client=``).
The SDK keeps its own base URL; it must point at the run's upstream for that provider
(``run.upstreams[provider]`` + the SDK's version segment), so request paths are the same as
through the proxy. Without a current run the transports forward requests untouched.

    client = httpx.AsyncClient(transport=AsyncWireTransport("openai"))
    AsyncOpenAI(base_url=run.upstreams["openai"] + "/v1", http_client=client)

Some SDKs ship their own fork of httpx (``anthropic`` ≥ 2.16 uses ``httpx2`` and rejects
``httpx`` clients); :func:`transports_for` builds the same two transports on such a module.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from types import ModuleType
from typing import Any, cast
from urllib.parse import urlsplit

import httpx

from ..errors import RecoverableStepError
from .loop import run_on_wire_loop
from .messages import WireResponse
from .seam import Wired, WireRequest, WireSeam, current_seam, upstream_http
from .upstream import tls_context


@functools.lru_cache(maxsize=256)
def _base_path(base: str) -> str:
    return urlsplit(base).path.rstrip("/")


def _wire_request(seam: WireSeam, provider: str, request: Any, body: bytes) -> WireRequest:
    timeout = request.extensions.get("timeout")
    # Plain string work: parsing URLs with httpx here cost ~0.1 ms per step, a third of a replay.
    path = request.url.path
    prefix = _base_path(seam.upstreams[provider])
    if prefix and path.startswith(prefix + "/"):
        path = path[len(prefix) :]
    return WireRequest(
        method=request.method,
        provider=provider,
        path=path,
        url=str(request.url).split("?", 1)[0].split("#", 1)[0],
        query=request.url.query.decode(),
        headers=list(request.headers.multi_items()),
        body=body,
        timeout=dict(timeout) if isinstance(timeout, dict) else None,
    )


def transports_for(module: ModuleType | str) -> tuple[type, type]:
    """``(AsyncWireTransport, WireTransport)`` built on an httpx-compatible module."""
    built = _built(module)
    return built["async"], built["sync"]


def routed_transport_for(module: ModuleType | str) -> type:
    """``AsyncRoutedTransport`` built on an httpx-compatible module (``tether.mcp_http_client``'s)."""
    return _built(module)["routed"]


@functools.cache
def _built(module: ModuleType | str) -> dict[str, type]:
    # Any: the module is chosen at run time (httpx, or a vendored copy such as httpx2).
    http: Any = importlib.import_module(module) if isinstance(module, str) else module

    def translate(e: RecoverableStepError) -> Exception:
        # SDKs treat transport errors as retryable connection failures: exactly our meaning.
        # An upstream timeout stays a timeout (the SDK's own timeout, applied upstream).
        if isinstance(e.__cause__, (httpx.TimeoutException, upstream_http().TimeoutException)):
            error: Exception = http.ReadTimeout(str(e))
            return error
        error = http.ReadError(str(e))
        return error

    class AsyncStream(http.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, stream: AsyncIterator[bytes]) -> None:
            self._stream = stream

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._stream:
                    yield chunk
            except RecoverableStepError as e:
                raise translate(e) from e

        async def aclose(self) -> None:
            aclose = getattr(self._stream, "aclose", None)  # the seam's streams are async generators
            if aclose is not None:
                await aclose()

    class AsyncWireTransport(http.AsyncBaseTransport):  # type: ignore[misc]
        """Async transport into the seam of the current run (or of ``run``)."""

        def __init__(self, provider: str, run: Wired | None = None) -> None:
            self.provider = provider
            self.run = run
            # Built on first use, on the process's one TLS context: an HTTP transport loading the
            # CA bundle itself costs ~20 ms each (a client per run: ~1 ms a turn over 20 turns,
            # benchmarks/peer_turns.py, durable=False), and requests that reach a run's seam never
            # need it.
            self._plain: Any = None

        async def handle_async_request(self, request: Any) -> Any:
            seam = self.run.seam if self.run is not None else current_seam()
            if seam is None:
                if self._plain is None:
                    self._plain = http.AsyncHTTPTransport(verify=tls_context())
                return await self._plain.handle_async_request(request)
            body = await request.aread()
            try:
                response = await seam.handle(_wire_request(seam, self.provider, request, body))
            except RecoverableStepError as e:
                raise translate(e) from e
            return http.Response(response.status, headers=response.headers, stream=AsyncStream(response.stream), request=request)

        async def aclose(self) -> None:
            if self._plain is not None:
                await self._plain.aclose()

    class SyncStream(http.SyncByteStream):  # type: ignore[misc]
        def __init__(self, stream: AsyncIterator[bytes]) -> None:
            self._stream = stream

        def __iter__(self) -> Iterator[bytes]:
            while True:
                try:
                    # An async generator's __anext__() is awaitable by run_coroutine_threadsafe.
                    yield run_on_wire_loop(cast("Coroutine[Any, Any, bytes]", self._stream.__anext__()))
                except StopAsyncIteration:
                    return
                except RecoverableStepError as e:
                    raise translate(e) from e

        def close(self) -> None:
            aclose = getattr(self._stream, "aclose", None)
            if aclose is not None:
                run_on_wire_loop(aclose())

    class WireTransport(http.BaseTransport):  # type: ignore[misc]
        """Sync transport: runs the seam on the process's wire loop."""

        def __init__(self, provider: str, run: Wired | None = None) -> None:
            self.provider = provider
            self.run = run
            self._plain: Any = None  # built on first use, as above

        def handle_request(self, request: Any) -> Any:
            seam = self.run.seam if self.run is not None else current_seam()
            if seam is None:
                if self._plain is None:
                    self._plain = http.HTTPTransport(verify=tls_context())
                return self._plain.handle_request(request)
            body = request.read()
            try:
                response = run_on_wire_loop(seam.handle(_wire_request(seam, self.provider, request, body)))
            except RecoverableStepError as e:
                raise translate(e) from e
            return http.Response(response.status, headers=response.headers, stream=SyncStream(response.stream), request=request)

        def close(self) -> None:
            if self._plain is not None:
                self._plain.close()

    class AsyncRoutedTransport(http.AsyncBaseTransport):  # type: ignore[misc]
        """Async transport that asks ``route`` what answers each request: a ``WireResponse``
        (served in the caller's task), or None: the request goes out as usual."""

        def __init__(self, route: Callable[[Any], Awaitable[WireResponse | None]]) -> None:
            self.route = route
            self._plain: Any = None  # built on first use, as above

        async def handle_async_request(self, request: Any) -> Any:
            try:
                response = await self.route(request)
            except RecoverableStepError as e:
                raise translate(e) from e
            if response is None:
                if self._plain is None:
                    self._plain = http.AsyncHTTPTransport(verify=tls_context())
                return await self._plain.handle_async_request(request)
            if response.body is not None:
                return http.Response(response.status, headers=response.headers, content=response.body, request=request)
            return http.Response(response.status, headers=response.headers, stream=AsyncStream(response.stream), request=request)

        async def aclose(self) -> None:
            if self._plain is not None:
                await self._plain.aclose()

    return {"async": AsyncWireTransport, "sync": WireTransport, "routed": AsyncRoutedTransport}


AsyncWireTransport, WireTransport = transports_for(httpx)
