"""In-process httpx transports: the fast way into the wire seam (DESIGN §3).

Hand an SDK an httpx client built on one of these wherever the SDK accepts one (``http_client=``).
The SDK keeps its own base URL; it must point at the run's upstream for that provider
(``run.upstreams[provider]`` + the SDK's version segment), so request paths are the same as
through the proxy. Without a current run the transports forward requests untouched.

    client = httpx.AsyncClient(transport=AsyncWireTransport("openai"))
    AsyncOpenAI(base_url=run.upstreams["openai"] + "/v1", http_client=client)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx

from ..errors import RecoverableStepError
from ..run import Run, current_run
from .loop import run_on_wire_loop
from .seam import WireRequest, WireResponse


def _wire_request(run: Run, provider: str, request: httpx.Request, body: bytes) -> WireRequest:
    base = httpx.URL(run.upstreams[provider])
    path = request.url.path
    prefix = base.path.rstrip("/")
    if prefix and path.startswith(prefix + "/"):
        path = path[len(prefix) :]
    return WireRequest(
        method=request.method,
        provider=provider,
        path=path,
        url=str(request.url.copy_with(query=None)),
        query=request.url.query.decode(),
        headers=list(request.headers.multi_items()),
        body=body,
    )


def _translate(e: RecoverableStepError) -> httpx.TransportError:
    """SDKs treat transport errors as retryable connection failures: exactly our meaning."""
    return httpx.ReadError(str(e))


class _AsyncStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except RecoverableStepError as e:
            raise _translate(e) from e

    async def aclose(self) -> None:
        await self._stream.aclose()


class AsyncWireTransport(httpx.AsyncBaseTransport):
    """Async httpx transport into the seam of the current run (or of ``run``)."""

    def __init__(self, provider: str, run: Run | None = None) -> None:
        self.provider = provider
        self.run = run
        self._plain = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        run = self.run or current_run()
        if run is None:
            return await self._plain.handle_async_request(request)
        body = await request.aread()
        try:
            response = await run.seam.handle(_wire_request(run, self.provider, request, body))
        except RecoverableStepError as e:
            raise _translate(e) from e
        return httpx.Response(response.status, headers=response.headers, stream=_AsyncStream(response.stream), request=request)

    async def aclose(self) -> None:
        await self._plain.aclose()


class _SyncStream(httpx.SyncByteStream):
    def __init__(self, response: WireResponse) -> None:
        self._stream = response.stream

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                yield run_on_wire_loop(self._stream.__anext__())
            except StopAsyncIteration:
                return
            except RecoverableStepError as e:
                raise _translate(e) from e

    def close(self) -> None:
        run_on_wire_loop(self._stream.aclose())


class WireTransport(httpx.BaseTransport):
    """Sync httpx transport: runs the seam on the process's wire loop."""

    def __init__(self, provider: str, run: Run | None = None) -> None:
        self.provider = provider
        self.run = run
        self._plain = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        run = self.run or current_run()
        if run is None:
            return self._plain.handle_request(request)
        body = request.read()
        try:
            response = run_on_wire_loop(run.seam.handle(_wire_request(run, self.provider, request, body)))
        except RecoverableStepError as e:
            raise _translate(e) from e
        return httpx.Response(response.status, headers=response.headers, stream=_SyncStream(response), request=request)

    def close(self) -> None:
        self._plain.close()
