"""An MCP server built with the official Python SDK (``mcp`` 2.x: ``MCPServer``, FastMCP before 2.0),
whose side-effect tool writes one line per call to a ledger file the tests read from outside.

    python tests/support/mcp_ledger.py --ledger FILE stdio
    python tests/support/mcp_ledger.py --ledger FILE http --port PORT [--json]

Tools: ``charge(customer, amount)`` (the side effect: a ledger line with the idempotency key the
call carried in ``_meta``; ``$LEDGER_SLOW_S`` seconds after writing it, it answers), ``refund``
(always an ``isError`` result: the tool failed), ``balance`` (a read: the number of charges) —
annotated not destructive (their effects only add lines) — and ``void(customer)``, which carries
no annotations, so MCP's defaults make it destructive (a ledger line too).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The ``_meta`` key Tether's idempotency key arrives under (tether.mcp.IDEMPOTENCY_META).
KEY = "tether.dev/idempotency-key"


# At the top: the SDK reads the tools' annotations from this module's globals.
try:
    from mcp.server.mcpserver import Context, MCPServer
except ImportError:
    try:  # mcp 1.x (the LangChain family's and CrewAI's pin): the same server under its old name
        _v1 = importlib.import_module("mcp.server.fastmcp")  # by name: mypy checks this file against 2.x
        globals().update(Context=_v1.Context, MCPServer=_v1.FastMCP)
    except ImportError:  # the helpers below serve environments without the SDK too
        pass


def _meta(ctx: Any) -> dict[str, Any]:
    """The request's ``_meta`` (mcp 2.x: the raw params; 1.x: a model with extra fields)."""
    params = getattr(ctx.request_context, "params", None)
    if isinstance(params, Mapping):
        return dict(params.get("_meta") or {})
    meta = getattr(ctx.request_context, "meta", None)
    return meta.model_dump(by_alias=True, exclude_none=True) if meta is not None else {}


def build(ledger: Path) -> Any:
    server = MCPServer("ledger")

    def charge(customer: str, amount: int, ctx: Context) -> str:
        """Charge a customer an amount in cents."""
        meta = _meta(ctx)
        with ledger.open("a") as f:
            f.write(json.dumps({"tool": "charge", "customer": customer, "amount": amount, "key": meta.get(KEY), "meta": meta}) + "\n")
        time.sleep(float(os.environ.get("LEDGER_SLOW_S", "0")))
        return f"charged {customer} {amount} cents"

    def refund(customer: str) -> str:
        """Refund a customer (always fails: refunds are closed)."""
        with ledger.open("a") as f:
            f.write(json.dumps({"tool": "refund", "customer": customer}) + "\n")
        raise ValueError(f"refunds are closed for {customer}")

    def balance() -> int:
        """The number of charges so far."""
        return len(charges(ledger))

    def void(customer: str) -> str:
        """Void every charge of a customer."""
        with ledger.open("a") as f:
            f.write(json.dumps({"tool": "void", "customer": customer}) + "\n")
        return f"voided {customer}"

    from mcp.types import ToolAnnotations

    # Not the decorator: mypy sees an untyped one where mcp is not installed.
    server.add_tool(charge, annotations=ToolAnnotations(destructiveHint=False))
    server.add_tool(refund, annotations=ToolAnnotations(destructiveHint=False))
    server.add_tool(balance, annotations=ToolAnnotations(readOnlyHint=True))
    server.add_tool(void)
    return server


def charges(ledger: Path, tool: str = "charge") -> list[dict[str, Any]]:
    """The ledger's lines for ``tool``, read from outside the server."""
    if not ledger.exists():
        return []
    return [line for line in map(json.loads, ledger.read_text().splitlines()) if line["tool"] == tool]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stdio_command(ledger: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--ledger", str(ledger), "stdio"]


@dataclass
class HttpServer:
    url: str
    process: subprocess.Popen[bytes]


@contextmanager
def http_server(ledger: Path, *, json_response: bool = False, env: dict[str, str] | None = None) -> Iterator[HttpServer]:
    """The server over Streamable HTTP in a process of its own (its URL: ``.url``)."""
    port = free_port()
    argv = [sys.executable, str(Path(__file__).resolve()), "--ledger", str(ledger), "http", "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, *(["--json"] if json_response else [])],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield HttpServer(f"http://127.0.0.1:{port}/mcp", proc)
    finally:
        proc.kill()
        proc.wait(10)


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the MCP server did not start (exit {proc.poll()})") from None
            time.sleep(0.05)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ledger", required=True)
    sub = p.add_subparsers(dest="transport", required=True)
    sub.add_parser("stdio")
    http = sub.add_parser("http")
    http.add_argument("--port", type=int, required=True)
    http.add_argument("--json", action="store_true", help="answer with JSON instead of an event stream")
    args = p.parse_args()
    server = build(Path(args.ledger))
    if args.transport == "stdio":
        server.run("stdio")
    elif hasattr(server, "settings") and hasattr(server.settings, "port"):  # mcp 1.x: the transport's options are settings
        server.settings.host, server.settings.port, server.settings.json_response = "127.0.0.1", args.port, args.json
        server.run("streamable-http")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port, json_response=args.json)


if __name__ == "__main__":
    main()
