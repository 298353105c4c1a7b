"""A small HTTP/1.1 server on asyncio streams and ``h11``: what the loopback proxy and the MCP
relay's endpoint serve with.

Not aiohttp: where aiohttp is installed the OpenAI SDK imports it on its own (its optional
``httpx_aiohttp`` transport), and so do other SDKs, which slowed every framework's start-up
beside Tether (benchmarks/import_time.py). ``h11`` is httpcore's parser, so every httpx user
has it already. Loopback only, one request at a time per connection (keep-alive, no
pipelining), a body of at most 64 MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import h11

MAX_BODY = 64 * 1024 * 1024
#: Framing headers the server writes itself.
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})


@dataclass
class Request:
    method: str
    #: The path as sent (not percent-decoded), without the query.
    path: str
    query: str
    #: Header names in lower case, as httpx gives them.
    headers: list[tuple[str, str]]
    body: bytes = b""


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    #: The whole body, sent in one write with its length; unless ``stream`` is given (chunked).
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None
    #: Raised by ``stream`` when it breaks: the connection is then cut, so the caller sees a failed
    #: answer, never a short one.
    broken: tuple[type[BaseException], ...] = ()


def json_response(payload: Any, status: int) -> Response:
    return Response(status, [("content-type", "application/json")], json.dumps(payload).encode())


Handler = Callable[[Request], Awaitable[Response]]


class _Hangup(Exception):
    pass


class Server:
    """A listening server (:func:`serve`): its ``port``, and ``close()``, which also drops the
    connections its callers keep alive (``asyncio.Server.wait_closed`` waits for them since 3.12)."""

    def __init__(self, server: asyncio.Server, connections: set[asyncio.StreamWriter]) -> None:
        self._server, self._connections = server, connections
        self.port = int(server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self._server.close()
        for writer in list(self._connections):
            writer.transport.abort()
        await self._server.wait_closed()


async def serve(handler: Handler, host: str = "127.0.0.1", port: int = 0) -> Server:
    """Serve ``handler`` on ``host:port`` (0: a free port, ``Server.port``)."""
    connections: set[asyncio.StreamWriter] = set()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.add(writer)
        try:
            await _Connection(handler, reader, writer).run()
        finally:
            connections.discard(writer)

    return Server(await asyncio.start_server(connected, host, port), connections)


class _Connection:
    def __init__(self, handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.handler, self.reader, self.writer = handler, reader, writer
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=2**20)

    async def run(self) -> None:
        try:
            while await self._one():
                self.h11.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, _Hangup, asyncio.IncompleteReadError):
            pass
        finally:
            if self.h11.our_state is h11.ERROR:
                self.writer.transport.abort()  # a broken answer: the caller must see a failure
            else:
                self.writer.close()

    async def _one(self) -> bool:
        """Read one request and answer it; whether the connection can take another."""
        request = await self._read()
        if request is None:
            return False
        # The answer runs beside a read of the socket: a caller that hangs up (an SDK timing out
        # before its retry) cancels it, so an answer nobody reads is not recorded (a stream already
        # being recorded finishes on its own: WriteScheduler.tee).
        answering = asyncio.ensure_future(self._answer(request))
        hangup = asyncio.ensure_future(self.reader.read(65536))
        try:
            await asyncio.wait({answering, hangup}, return_when=asyncio.FIRST_COMPLETED)
            if hangup.done() and not hangup.cancelled():
                data = hangup.exception() is None and hangup.result()
                if not data:  # EOF or reset: nobody is waiting for the answer (cancelled below)
                    return False
                self.h11.receive_data(data)  # the next request, early: h11 keeps it
            await answering
        finally:
            for task in (hangup, answering):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task  # the reader takes one waiter at a time: this one must be gone
        return self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE

    async def _read(self) -> Request | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as e:
                await self._send_simple(e.error_status_hint, f"tether: bad request: {e}")
                return None
            if event is h11.NEED_DATA:
                if self.h11.they_are_waiting_for_100_continue:
                    self._write(h11.InformationalResponse(status_code=100, headers=[]))
                self.h11.receive_data(await self.reader.read(65536))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    await self._send_simple(413, f"tether: a request body over {MAX_BODY} bytes")
                    return None
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                target = head.target.decode("latin-1")
                path, _, query = target.partition("?")
                headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers]
                return Request(head.method.decode("ascii"), path, query, headers, bytes(body))
            else:  # ConnectionClosed, PAUSED: the caller is done with this connection
                return None

    async def _answer(self, request: Request) -> None:
        try:
            response = await self.handler(request)
        except Exception as e:  # a bug, not the caller's: say so rather than hang up
            response = json_response({"error": {"message": f"tether: {type(e).__name__}: {e}", "type": "tether_proxy"}}, 500)
        headers = [(k, v) for k, v in response.headers if k.lower() not in _FRAMING]
        if response.stream is None:
            body = response.body
            head = h11.Response(status_code=response.status, headers=[*headers, ("content-length", str(len(body)))])
            self.writer.write(b"".join(self.h11.send(e) or b"" for e in (head, h11.Data(data=body), h11.EndOfMessage())))
            await self.writer.drain()
            return
        self._write(h11.Response(status_code=response.status, headers=headers))  # no length: chunked
        try:
            async for chunk in response.stream:
                if chunk:
                    self._write(h11.Data(data=chunk))
                    await self.writer.drain()
        except response.broken:
            self.h11.send_failed()
            raise _Hangup from None
        self._write(h11.EndOfMessage())
        await self.writer.drain()

    def _write(self, event: Any) -> None:
        data = self.h11.send(event)
        if data:
            self.writer.write(data)

    async def _send_simple(self, status: int, message: str) -> None:
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        with contextlib.suppress(h11.LocalProtocolError):
            body = json.dumps({"error": {"message": message, "type": "tether_proxy"}}).encode()
            head = h11.Response(
                status_code=status,
                headers=[("content-type", "application/json"), ("content-length", str(len(body))), ("connection", "close")],
            )
            self.writer.write(b"".join(self.h11.send(e) or b"" for e in (head, h11.Data(data=body), h11.EndOfMessage())))
            await self.writer.drain()
