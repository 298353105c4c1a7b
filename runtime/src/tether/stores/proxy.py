"""A store reached through a proxy that holds the credentials and lets one run touch only its own
keys (``tether store-proxy``; store URL ``tether+unix:///path/to/store.sock``).

With the Kubernetes executor the agent's container gets no store credentials: it opens the store
at the proxy's socket, and the proxy (a container of its own in the run's pod, with the
namespace's store Secret) forwards each operation to the real store if :class:`RunKeys` allows
it, else answers "access denied" (:class:`~tether.errors.StoreAccessDenied`, terminal, like an S3
403). What one run may touch:

    journal/<run>/  runs/<run>/        read and write (its journal, progress)
    approvals/<run>/                   read; write only ``*.request.json`` (never a decision)
    memory/<namespace>/                read and write (memory keys are namespace-wide)
    cache/tools/                       read and write (the cross-run tool cache is namespace-wide;
                                       a bring-your-own agent's tools are not in the request)

Protocol: one connection per operation; each way one frame, a 4-byte big-endian length and a JSON
document (object bytes base64)::

    {"op": "get"|"get_versioned"|"put"|"create"|"replace"|"write_if"|"list"|"delete"|"get_many",
     "key": K, "prefix": P, "keys": [K...], "data": B64, "version": V}
    {"ok": RESULT}  or  {"error": {"kind": "denied"|"unavailable"|"error", "message": TEXT}}
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract import approvals_prefix, journal_prefix, memory_prefix, run_prefix, tool_cache_prefix
from ..errors import ConfigError, StoreAccessDenied, StoreError, StoreUnavailable
from .base import Store

SCHEME = "tether+unix"
_LENGTH = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024
_WRITES = ("put", "create", "replace", "write_if", "delete")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _bytes(text: str) -> bytes:
    return base64.b64decode(text)


@dataclass(frozen=True)
class RunKeys:
    """The keys of one run (see the module docstring)."""

    run_id: str
    namespace: str

    def _prefixes(self) -> tuple[str, ...]:
        return (
            journal_prefix(self.run_id),
            run_prefix(self.run_id),
            approvals_prefix(self.run_id),
            memory_prefix(self.namespace),
            tool_cache_prefix(),
        )

    def refusal(self, op: str, key: str) -> str | None:
        """Why ``op`` on ``key`` (a prefix for ``list``) is not this run's, or None."""
        parts = key.split("/")
        if key.startswith("/") or any(p in (".", "..") for p in parts) or "" in parts[:-1]:
            return f"{key!r} is not a plain store key"
        if not any(key.startswith(p) for p in self._prefixes()):
            return f"{key!r} is not a key of run {self.run_id}"
        if op in _WRITES and key.startswith(approvals_prefix(self.run_id)) and not key.endswith(".request.json"):
            return f"{key!r}: a run may ask for approvals, never decide them"
        return None


# ------------------------------------------------------------------------- the agent's side


class ProxyStore(Store):
    """The store at a ``tether store-proxy`` socket (thread-safe: a connection per operation)."""

    def __init__(self, socket_path: str, wait: float = 30.0) -> None:
        self.socket_path, self.wait = socket_path, wait
        self.url = f"{SCHEME}://{socket_path}"

    def _call(self, doc: dict[str, Any]) -> Any:
        deadline = time.monotonic() + self.wait
        while True:
            conn = socket.socket(socket.AF_UNIX)
            try:
                conn.connect(self.socket_path)
                break
            except OSError as e:  # the proxy is starting or restarting
                conn.close()
                if time.monotonic() >= deadline:
                    raise StoreUnavailable(f"store proxy not reachable at {self.socket_path}: {e}") from e
                time.sleep(0.05)
        try:
            with conn:
                data = json.dumps(doc).encode()
                conn.sendall(_LENGTH.pack(len(data)) + data)
                answer = json.loads(_recv(conn, _LENGTH.unpack(_recv(conn, _LENGTH.size))[0]))
        except (OSError, ValueError, EOFError) as e:
            raise StoreUnavailable(f"store proxy at {self.socket_path}: {doc['op']} failed: {e!r}") from e
        if "error" in answer:
            kind, message = answer["error"].get("kind"), str(answer["error"].get("message"))
            raise {"denied": StoreAccessDenied, "unavailable": StoreUnavailable}.get(kind, StoreError)(message)
        return answer.get("ok")

    def get(self, key: str) -> bytes | None:
        found = self._call({"op": "get", "key": key})
        return None if found is None else _bytes(found)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        found = self._call({"op": "get_versioned", "key": key})
        return None if found is None else (_bytes(found[0]), str(found[1]))

    def put(self, key: str, data: bytes) -> None:
        self._call({"op": "put", "key": key, "data": _b64(data)})

    def create(self, key: str, data: bytes) -> bool:
        return bool(self._call({"op": "create", "key": key, "data": _b64(data)}))

    def replace(self, key: str, data: bytes, version: str) -> bool:
        return bool(self._call({"op": "replace", "key": key, "data": _b64(data), "version": version}))

    def write_if(self, key: str, data: bytes, version: str | None) -> str | None:
        written = self._call({"op": "write_if", "key": key, "data": _b64(data), "version": version})
        return None if written is None else str(written)

    def list(self, prefix: str) -> list[str]:
        return list(self._call({"op": "list", "prefix": prefix}))

    def delete(self, key: str) -> None:
        self._call({"op": "delete", "key": key})

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        found = self._call({"op": "get_many", "keys": list(keys)})
        return {k: _bytes(v) for k, v in found.items()}


def _recv(conn: socket.socket, n: int) -> bytes:
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes is over the limit")
    chunks, left = [], n
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the store proxy closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------------------ the proxy


def _apply(store: Store, req: dict[str, Any]) -> Any:
    op = req["op"]
    if op == "get":
        data = store.get(req["key"])
        return None if data is None else _b64(data)
    if op == "get_versioned":
        found = store.get_versioned(req["key"])
        return None if found is None else [_b64(found[0]), found[1]]
    if op == "put":
        return store.put(req["key"], _bytes(req["data"]))
    if op == "create":
        return store.create(req["key"], _bytes(req["data"]))
    if op == "replace":
        return store.replace(req["key"], _bytes(req["data"]), str(req["version"]))
    if op == "write_if":
        version = req.get("version")
        return store.write_if(req["key"], _bytes(req["data"]), None if version is None else str(version))
    if op == "list":
        return store.list(req["prefix"])
    if op == "delete":
        return store.delete(req["key"])
    if op == "get_many":
        return {k: _b64(v) for k, v in store.get_many(req["keys"]).items()}
    raise ConfigError(f"unknown store operation {op!r}")


def answer(store: Store, scope: RunKeys, req: Any) -> dict[str, Any]:
    """The answer to one request, if every key it names is the run's."""
    try:
        op = req["op"]
        keys = req["keys"] if op == "get_many" else [req["prefix"] if op == "list" else req["key"]]
        for key in keys:
            if not isinstance(key, str) or (why := scope.refusal(op, key)):
                return {"error": {"kind": "denied", "message": f"store proxy: access denied: {why}"}}
        return {"ok": _apply(store, req)}
    except StoreAccessDenied as e:
        return {"error": {"kind": "denied", "message": str(e)}}
    except StoreUnavailable as e:
        return {"error": {"kind": "unavailable", "message": str(e)}}
    except (StoreError, ConfigError, KeyError, TypeError, ValueError) as e:
        return {"error": {"kind": "error", "message": f"{type(e).__name__}: {e}"}}


async def serve(store: Store, scope: RunKeys, socket_path: str, stop: asyncio.Event | None = None) -> None:
    """Serve ``store`` to run ``scope`` on ``socket_path`` until ``stop`` is set (or SIGTERM)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            if length > MAX_FRAME:
                return
            req = json.loads(await reader.readexactly(length))
            data = json.dumps(await asyncio.to_thread(answer, store, scope, req)).encode()
            writer.write(_LENGTH.pack(len(data)) + data)
            await writer.drain()
        except (OSError, EOFError, ValueError):
            pass  # the caller went away
        finally:
            writer.close()

    stop = stop or asyncio.Event()
    path = Path(socket_path)
    path.unlink(missing_ok=True)
    old = os.umask(0o077)
    try:
        server = await asyncio.start_unix_server(handle, path=str(path))
    finally:
        os.umask(old)
    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(f"tether store-proxy: run {scope.run_id}'s keys of {store.url} on {path}", file=sys.stderr, flush=True)
    async with server:
        await stop.wait()
    path.unlink(missing_ok=True)
