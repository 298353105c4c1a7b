"""The wire seam: every model HTTP request goes through :meth:`WireSeam.handle` (DESIGN §3).

Request in, response out, like an httpx transport. The in-process transports
(``tether.wire.transport``) and the loopback proxy (``tether.wire.proxy``) are only two ways in;
canonicalisation, the journal and error classification live here, once.

    replay   recorded key          → the recorded bytes, no upstream call
    live     success / terminal    → call upstream, record, then hand back
    live     recoverable           → call upstream, hand back, record nothing
    passthru not a model turn, or a body no protocol module understands → forwarded unrecorded
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import httpx

from ..canonical import fingerprint
from ..errors import RecoverableStepError, StoreError
from ..journal import Record, StepKey
from . import protocols
from .protocols.base import WireProtocol

if TYPE_CHECKING:
    from ..run import Run

#: Response headers kept in a record and replayed; everything else is transport or per-call noise.
KEPT_RESPONSE_HEADERS = ("content-type",)
#: Response headers never passed through (hop-by-hop, or no longer true once httpx decoded the body).
DROPPED_RESPONSE_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive", "set-cookie"})
#: Request headers never forwarded upstream (hop-by-hop, or recomputed by httpx).
HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding", "upgrade", "te"})


def classify(status: int) -> str:
    """``success``, ``terminal`` (recorded, replayed as the same error), ``recoverable`` or
    ``credentials``.

    401/403 say nothing about the request, only about the key it carried: they are passed
    through unrecorded (like a recoverable failure, though the SDK will not retry them), so a run
    retried after its key was fixed calls the model instead of replaying the refusal.
    """
    if 200 <= status < 300:
        return "success"
    if status in (408, 409, 429) or status >= 500:
        return "recoverable"
    if status in (401, 403):
        return "credentials"
    return "terminal"


@dataclass
class WireRequest:
    method: str
    provider: str
    #: Path relative to the provider's upstream base, e.g. ``/v1/chat/completions``.
    path: str
    #: The absolute URL to send upstream.
    url: str
    query: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


@dataclass
class WireResponse:
    status: int
    headers: list[tuple[str, str]]
    stream: AsyncIterator[bytes]
    replayed: bool = False


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


_END = object()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The CA bundle, loaded once per process (~0.1-0.2 s a load) for every run's upstream client."""
    return httpx.create_ssl_context()


class WireSeam:
    """The seam for one run attempt."""

    def __init__(self, run: Run, *, timeout: float = 600.0) -> None:
        self.run = run
        self.timeout = timeout
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}
        self._pumps: set[asyncio.Task[None]] = set()  # strong refs: a pump outlives an early-closing reader

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            timeout = httpx.Timeout(self.timeout, connect=30.0)
            client = self._clients[loop] = httpx.AsyncClient(timeout=timeout, follow_redirects=False, verify=_tls_context())
        return client

    async def aclose(self) -> None:
        for client in self._clients.values():
            try:
                await client.aclose()
            except RuntimeError:  # its loop is gone
                pass
        self._clients.clear()

    # -- the one function --------------------------------------------------------------------
    async def handle(self, request: WireRequest) -> WireResponse:
        protocol = protocols.find(request.provider, request.method, request.path)
        canonical = self._canonical(protocol, request) if protocol else None
        if protocol is None or canonical is None:
            return await self._forward(request)
        journal = self.run.journal
        key = journal.next_key("model", fingerprint("model", canonical))
        record = journal.replay(key)
        if record is not None:
            self.run.model_step(record, replayed=True)
            return WireResponse(record.response["status"], record.response["headers"], _once(record.body), replayed=True)
        limit = self.run.max_cost_usd
        if limit is not None and self.run.accounting.live_cost_usd >= limit:
            return self._refuse(
                f"tether: run {self.run.scope} reached its cost limit of ${limit:.2f} (spent ${self.run.accounting.live_cost_usd:.4f} live)"
            )
        return await self._live(protocol, request, key, canonical)

    def _refuse(self, message: str) -> WireResponse:
        """Answer for the provider with 402: every SDK raises it as a non-retryable status error,
        so the framework stops; the run notes why. Nothing is recorded or sent upstream."""
        self.run.limit_exceeded = message
        body = json.dumps({"error": {"message": message, "type": "tether_limit_exceeded", "code": "limit_exceeded"}}).encode()
        return WireResponse(402, [("content-type", "application/json")], _once(body))

    @staticmethod
    def _canonical(protocol: WireProtocol, request: WireRequest) -> dict[str, Any] | None:
        try:
            body = json.loads(request.body) if request.body else None
            query = dict(parse_qsl(request.query, keep_blank_values=True))
            headers = {k.lower(): v for k, v in request.headers}
            return protocol.canonical_request(request.path, query, headers, body)
        except (ValueError, TypeError):
            return None  # a body we do not understand passes through and never breaks the agent

    async def _send(self, request: WireRequest) -> httpx.Response:
        headers = [(k, v) for k, v in request.headers if k.lower() not in HOP_HEADERS]
        url = request.url + (f"?{request.query}" if request.query else "")
        client = self._client()
        try:
            return await client.send(client.build_request(request.method, url, headers=headers, content=request.body), stream=True)
        except httpx.TransportError as e:
            raise RecoverableStepError(f"{request.provider} upstream unreachable: {type(e).__name__}") from e

    @staticmethod
    def _response_headers(response: httpx.Response) -> list[tuple[str, str]]:
        return [(k, v) for k, v in response.headers.items() if k.lower() in KEPT_RESPONSE_HEADERS]

    @staticmethod
    def _passthrough_headers(response: httpx.Response) -> list[tuple[str, str]]:
        """Unrecorded responses keep the provider's headers (retry-after, x-should-retry...), so
        the SDK's own retry logic sees what it would without Tether."""
        return [(k, v) for k, v in response.headers.multi_items() if k.lower() not in DROPPED_RESPONSE_HEADERS]

    async def _forward(self, request: WireRequest) -> WireResponse:
        response = await self._send(request)
        return WireResponse(response.status_code, self._passthrough_headers(response), self._drain(response))

    @staticmethod
    async def _drain(response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx.TransportError as e:
            raise RecoverableStepError(f"upstream stream broke: {type(e).__name__}") from e
        finally:
            await response.aclose()

    async def _live(self, protocol: WireProtocol, request: WireRequest, key: StepKey, canonical: dict[str, Any]) -> WireResponse:
        started = time.time()
        response = await self._send(request)
        headers = self._response_headers(response)
        if classify(response.status_code) in ("recoverable", "credentials"):
            return WireResponse(response.status_code, self._passthrough_headers(response), self._drain(response))
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        model = protocol.model(request.path, json.loads(request.body))

        async def commit(body: bytes) -> None:
            record = Record(
                kind="model",
                fingerprint=key[1],
                occurrence=key[2],
                outcome="ok" if classify(response.status_code) == "success" else "error",
                request=canonical,
                response={"status": response.status_code, "headers": headers, "streamed": streamed, "protocol": protocol.name},
                body=body,
                usage=protocol.usage(body, streamed).to_dict() if response.status_code < 300 else {},
                model=model,
                started_at=started,
                duration_ms=(time.time() - started) * 1000,
            )
            try:
                await asyncio.to_thread(self.run.journal.append, record)
            except StoreError as e:
                raise RecoverableStepError(f"journal write failed, step not done: {e}") from e
            self.run.model_step(record, replayed=False)

        if not streamed:
            try:
                body = await response.aread()
            except httpx.TransportError as e:
                raise RecoverableStepError(f"upstream response broke: {type(e).__name__}") from e
            finally:
                await response.aclose()
            await commit(body)
            return WireResponse(response.status_code, headers, _once(body))
        return WireResponse(response.status_code, headers, self._tee(response, commit))

    async def _tee(self, response: httpx.Response, commit: Callable[[bytes], Awaitable[None]]) -> AsyncIterator[bytes]:
        """Pass a stream through as it arrives, record it whole, then release the last chunk.

        A pump task reads upstream independently of the consumer, so a caller that stops
        reading early (many SDKs close the response once they saw the final event) still gets
        the step recorded. The last chunk waits for the record: the framework never holds a
        complete response that is not durable.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()  # chunks, then _END or the error

        async def pump() -> None:
            chunks: list[bytes] = []
            held: bytes | None = None
            try:
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    if held is not None:
                        queue.put_nowait(held)
                    held = chunk
                await commit(b"".join(chunks))
                if held is not None:
                    queue.put_nowait(held)
                queue.put_nowait(_END)
            except httpx.TransportError as e:
                queue.put_nowait(RecoverableStepError(f"upstream stream broke: {type(e).__name__}"))
            except BaseException as e:
                queue.put_nowait(e)
            finally:
                await response.aclose()

        task = asyncio.ensure_future(pump())
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # A consumer that left early does not cancel the pump: it finishes and records alone.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
