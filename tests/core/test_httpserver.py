"""The proxy's HTTP server (tether.wire.httpserver, h11 on asyncio streams) as real clients meet it:
httpx with keep-alive and chunked uploads, a caller that hangs up mid-answer, a stream that breaks,
a body over the limit. The proxy's own behaviour through it is tested with every SDK in
test_replay.py, test_failures.py and test_occurrences.py."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from tether.wire import httpserver
from tether.wire.httpserver import Request, Response, json_response, serve


class Broken(Exception):
    pass


async def _with_server(handler: httpserver.Handler, body: Callable[[str], Awaitable[None]]) -> None:
    server = await serve(handler)
    try:
        await body(f"http://127.0.0.1:{server.port}")
    finally:
        await server.close()


def test_requests_on_one_kept_alive_connection_with_their_bodies_paths_and_queries() -> None:
    seen: list[Request] = []

    async def handler(request: Request) -> Response:
        seen.append(request)
        return json_response({"n": len(seen), "len": len(request.body)}, 200)

    async def chunks() -> AsyncIterator[bytes]:
        for part in (b"a" * 1000, b"b" * 70_000):
            yield part

    async def body(url: str) -> None:
        async with httpx.AsyncClient() as client:
            first = await client.post(url + "/r/tok/openai/v1/chat%2Fx?a=1&b=%20", content=b'{"x": 1}', headers={"X-Key": "k"})
            second = await client.post(url + "/up", content=chunks())  # chunked transfer encoding
            third = await client.get(url + "/")
        assert [first.json(), second.json(), third.json()] == [{"n": 1, "len": 8}, {"n": 2, "len": 71_000}, {"n": 3, "len": 0}]
        assert first.headers["content-length"] == str(len(first.content))

    asyncio.run(_with_server(handler, body))
    assert (seen[0].method, seen[0].path, seen[0].query) == ("POST", "/r/tok/openai/v1/chat%2Fx", "a=1&b=%20")
    assert ("x-key", "k") in seen[0].headers and seen[1].body == b"a" * 1000 + b"b" * 70_000


def test_a_caller_that_hangs_up_cancels_its_answer() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(request: Request) -> Response:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Response(200)

    async def body(url: str) -> None:
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        await asyncio.wait_for(started.wait(), 5)
        writer.close()  # the SDK timed out
        await asyncio.wait_for(cancelled.wait(), 5)

    asyncio.run(_with_server(handler, body))


def test_a_stream_that_breaks_cuts_the_connection_never_a_short_answer() -> None:
    async def stream() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        raise Broken

    async def handler(request: Request) -> Response:
        if request.path == "/after":
            return Response(200, body=b"fine")
        return Response(200, [("content-type", "text/event-stream")], stream=stream(), broken=(Broken,))

    async def body(url: str) -> None:
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.RemoteProtocolError):
                await client.get(url + "/s")
            assert (await client.get(url + "/after")).text == "fine"  # a new connection

    asyncio.run(_with_server(handler, body))


def test_a_body_over_the_limit_is_refused_with_413(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpserver, "MAX_BODY", 1000)
    called: list[Request] = []

    async def handler(request: Request) -> Response:
        called.append(request)
        return Response(200)

    async def body(url: str) -> None:
        async with httpx.AsyncClient() as client:
            refused = await client.post(url + "/big", content=b"x" * 5000)
        assert refused.status_code == 413 and "over 1000 bytes" in refused.json()["error"]["message"]

    asyncio.run(_with_server(handler, body))
    assert called == []


def test_a_handler_that_fails_answers_500_and_the_server_goes_on() -> None:
    async def handler(request: Request) -> Response:
        if request.path == "/bug":
            raise KeyError("oops")
        return Response(204)

    async def body(url: str) -> None:
        async with httpx.AsyncClient() as client:
            bug = await client.get(url + "/bug")
            fine = await client.get(url + "/fine")
        assert bug.status_code == 500 and "KeyError" in bug.json()["error"]["message"] and fine.status_code == 204

    asyncio.run(_with_server(handler, body))


def test_garbage_is_answered_400_and_closed() -> None:
    async def handler(request: Request) -> Response:
        return Response(200)

    async def body(url: str) -> None:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            answer = await asyncio.to_thread(s.recv, 4096)
        assert answer.startswith(b"HTTP/1.1 400")

    asyncio.run(_with_server(handler, body))


def test_close_drops_the_connections_callers_keep_alive() -> None:
    async def handler(request: Request) -> Response:
        return Response(200, body=b"ok")

    async def main() -> None:
        server = await serve(handler)
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{server.port}/")).text == "ok"  # its connection stays open
            await asyncio.wait_for(server.close(), 5)
            with pytest.raises(httpx.TransportError):
                await client.get(f"http://127.0.0.1:{server.port}/")

    asyncio.run(main())
