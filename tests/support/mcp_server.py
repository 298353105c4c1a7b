"""A real MCP server built with the official Python SDK (``mcp``: ``MCPServer``, the SDK 2 name of
FastMCP), for the tests of AgentTools with ``mcp``:

    python tests/support/mcp_server.py http PORT [EFFECTS]    Streamable HTTP at http://127.0.0.1:PORT/mcp
    python tests/support/mcp_server.py stdio [EFFECTS]        over stdin/stdout

Every tool call appends a line to the file EFFECTS (else ``$EFFECTS``: the side effect the tests count): the tool, its
arguments, the sha256 of the Authorization header it was sent (HTTP), the ``MCP_TOKEN`` variable
it sees (stdio: its environment) and the idempotency key in the call's ``_meta``. Over HTTP a
request without ``Authorization: Bearer $MCP_EXPECTED`` (when set) is refused with 401.

Tools: ``book`` (a side effect, idempotent, not destructive), ``cancel`` (no annotations: MCP's
defaults make it destructive), ``lookup`` (read-only), ``find`` (an object parameter), ``fail`` (an ``isError`` result), ``verify``
(a JSON-RPC error answer, INVALID_PARAMS) and
``secret_admin`` (never allowed by the tests' AgentTools); ``get-weather`` (idempotent, the name the
examples' weather script calls: the kind test serves it as a Service). ``$MCP_HOST`` (default
127.0.0.1) is the HTTP address to bind: another than localhost turns the SDK's DNS-rebinding guard off.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import Any, Literal

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from mcp_types import INVALID_PARAMS
from pydantic import BaseModel

server = MCPServer("tether-test-mcp")
EFFECTS = os.environ.get("EFFECTS", "")


def _effect(ctx: Context, tool: str, arguments: dict[str, Any]) -> None:
    headers = ctx.headers or {}
    auth = headers.get("authorization")
    meta = ctx.request_context.meta or {}
    seen = {
        "tool": tool,
        "arguments": arguments,
        "pid": os.getpid(),
        "auth_sha": auth and hashlib.sha256(auth.encode()).hexdigest()[:12],
        "env_token_sha": (t := os.environ.get("MCP_TOKEN")) and hashlib.sha256(t.encode()).hexdigest()[:12],
        "idempotency_key": dict(meta).get("tether.dev/idempotency-key"),
    }
    with open(EFFECTS, "a") as f:
        f.write(json.dumps(seen) + "\n")


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def book(room: str, ctx: Context, nights: int = 1) -> str:
    """Book a room for some nights."""
    _effect(ctx, "book", {"room": room, "nights": nights})
    return f"booked {room} for {nights} night(s)"


@server.tool()
def cancel(booking: str, ctx: Context) -> str:
    """Cancel a booking."""
    _effect(ctx, "cancel", {"booking": booking})
    return f"cancelled {booking}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(city: str, ctx: Context) -> str:
    """Find rooms in a city."""
    _effect(ctx, "lookup", {"city": city})
    return f"{city}: rooms 101, 102"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(ctx: Context) -> str:
    """Always fails."""
    _effect(ctx, "fail", {})
    raise ToolError("the hotel is closed")


@server.tool(name="get-weather", annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def get_weather(city: str, ctx: Context) -> str:
    """Current weather in a city."""
    _effect(ctx, "get-weather", {"city": city})
    return f"{city}: sunny, 21C (from the MCP server)"


class Filter(BaseModel):
    city: str
    stars: int | None = None


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find(filter: Filter, ctx: Context, sort: Literal["price", "rating"] | None = None) -> str:
    """Find rooms matching a filter."""
    _effect(ctx, "find", {"filter": filter.model_dump(exclude_none=True), "sort": sort})
    return f"{filter.city}: 2 rooms, by {sort}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def verify(code: str, ctx: Context) -> str:
    """Check a booking code."""
    _effect(ctx, "verify", {"code": code})
    raise MCPError(INVALID_PARAMS, f"unknown booking code {code}")  # a JSON-RPC error answer


@server.tool()
def secret_admin(ctx: Context) -> str:
    """Never offered to an agent."""
    _effect(ctx, "secret_admin", {})
    return "admin"


def main(argv: list[str]) -> None:
    global EFFECTS
    where = argv[2:] if argv[0] == "http" else argv[1:]
    EFFECTS = where[0] if where else EFFECTS
    if argv[0] == "stdio":
        server.run("stdio")
        return
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    host = os.environ.get("MCP_HOST", "127.0.0.1")
    app = server.streamable_http_app(host=host)
    expected = os.environ.get("MCP_EXPECTED")

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if expected and scope["type"] == "http" and Request(scope).headers.get("authorization") != f"Bearer {expected}":
            await JSONResponse({"error": "unauthorized"}, status_code=401)(scope, receive, send)
            return
        await app(scope, receive, send)

    uvicorn.run(guarded, host=host, port=int(argv[1]), log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
