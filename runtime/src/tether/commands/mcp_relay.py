"""``tether mcp-relay --via URL -- COMMAND [ARGS...]``: a stdio MCP server, journaled like an HTTP one.

The framework's MCP client launches this in the server's place (``tether.mcp_stdio`` writes the
command line). The relay starts ``COMMAND ARGS`` itself and stands between the two pipes:

    client request (method + id)  → POSTed to the run's proxy (``--via``, ``tether.mcp``), which
                                    replays a recorded tools/call or sends it on to the relay's
                                    own loopback endpoint, which writes it to the server's stdin
                                    and answers with the server's response
    anything else from the client → straight to the server (notifications, answers to the server)
    anything else from the server → straight to the client (notifications, the server's requests)

So the journal, the keys and the idempotency key are the HTTP path's, in the run's process. A
request the proxy cannot serve (the run's process is gone) is answered with a JSON-RPC error;
nothing is recorded for it. Ends when the client closes stdin or the server exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from typing import TYPE_CHECKING, Any

from . import parser

if TYPE_CHECKING:
    from ..wire.httpserver import Request, Response


def main(argv: list[str]) -> int:
    p = parser("mcp-relay", "Launch a stdio MCP server behind the run's journal (what tether.mcp_stdio's command runs).")
    p.add_argument("--via", required=True, help="the run's MCP proxy base URL for this server (tether.mcp_stdio writes it)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]: the server")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("the server's command is missing: tether mcp-relay --via URL -- COMMAND [ARGS...]")
    return asyncio.run(Relay(args.via, command).run())


class Relay:
    def __init__(self, via: str, command: list[str]) -> None:
        self.via = via.rstrip("/")
        self.command = command
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.out = sys.stdout.buffer

    def _write(self, message: Any) -> None:
        self.out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.out.flush()

    async def run(self) -> int:
        import httpx

        from ..wire.httpserver import serve
        from ..wire.proxy import encode_upstream

        self.server = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=64 * 1024 * 1024
        )
        endpoint = await serve(self._serve)
        self.url = f"{self.via}/{encode_upstream(f'http://127.0.0.1:{endpoint.port}/')}"
        self.http = httpx.AsyncClient(timeout=None, trust_env=False)
        reading = asyncio.ensure_future(self._from_server())
        try:
            await self._from_client()
        finally:
            if self.server.stdin is not None:
                self.server.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.server.wait(), 5)
            if self.server.returncode is None:
                self.server.terminate()
                await self.server.wait()
            reading.cancel()
            await self.http.aclose()
            await endpoint.close()
        return 0

    # -- client → server -------------------------------------------------------------------------
    async def _from_client(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        tasks: set[asyncio.Task[None]] = set()
        ended = asyncio.ensure_future(self.server.wait())
        while True:
            line_task = asyncio.ensure_future(reader.readline())
            done, _ = await asyncio.wait({line_task, ended}, return_when=asyncio.FIRST_COMPLETED)
            if line_task not in done:  # the server exited
                line_task.cancel()
                break
            line = line_task.result()
            if not line:
                break
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                await self._to_server(line)  # not ours to judge: the server answers it
                continue
            if isinstance(message, dict) and "method" in message and "id" in message:
                task = asyncio.ensure_future(self._request(message, line))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            else:
                await self._to_server(line)
        if tasks:
            await asyncio.wait(tasks)

    async def _request(self, message: dict[str, Any], line: bytes) -> None:
        """A client request, through the run's proxy; its answer (and any event before it) back."""
        from ..mcp import answer_of

        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        try:
            response = await self.http.post(self.url, content=line, headers=headers)
            body = response.content
            ok, content_type = 200 <= response.status_code < 300, response.headers.get("content-type", "")
        except Exception as e:  # the run's process is gone or broke the connection: not recorded
            ok, body, content_type, failure = False, b"", "", f"{type(e).__name__}"
        else:
            failure = f"HTTP {response.status_code}: {body[:300].decode(errors='replace')}"
        answer = answer_of(body, content_type, message["id"]) if ok else None
        if answer is None:
            answer = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32603, "message": f"tether mcp-relay: {failure}"}}
        self._write(answer)

    async def _to_server(self, line: bytes) -> None:
        assert self.server.stdin is not None
        self.server.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        await self.server.stdin.drain()

    # -- the relay's own endpoint: what the proxy sends on ------------------------------------------
    async def _serve(self, request: Request) -> Response:
        from ..wire.httpserver import json_response

        body = request.body
        message = json.loads(body)
        key = json.dumps(message.get("id"))
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[key] = answer
        try:
            await self._to_server(body)
            return json_response(await answer, 200)
        finally:
            self.pending.pop(key, None)

    # -- server → client ---------------------------------------------------------------------------
    async def _from_server(self) -> None:
        assert self.server.stdout is not None
        while line := await self.server.stdout.readline():
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a server must write only JSON-RPC to stdout
            waiting = None
            if isinstance(message, dict) and "method" not in message:
                waiting = self.pending.get(json.dumps(message.get("id")))
            if waiting is not None and not waiting.done():
                waiting.set_result(message)
            else:
                self._write(message)
