"""The loopback recording proxy: the universal way into the wire seam (README.md, "How it works": Wire seam).

Any SDK, any language, a subprocess CLI: point its base URL at ``proxy.base_url(run, provider)``
(``http://127.0.0.1:PORT/r/<token>/<provider>``) and every request reaches the run's seam. The
token in the path keeps concurrent runs in one process apart. Live requests go upstream with the
caller's own credentials; the proxy never stores or logs them.
"""

from __future__ import annotations

import secrets
import threading
from typing import TYPE_CHECKING

from aiohttp import web

from ..errors import RecoverableStepError
from .loop import run_on_wire_loop
from .seam import WireRequest

if TYPE_CHECKING:
    from ..run import Run  # typing only: run.py builds the seam, the wire never imports it


class WireProxy:
    def __init__(self) -> None:
        self._runs: dict[str, Run] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0

    # -- lifecycle (on the wire loop) ----------------------------------------------------------
    async def _start(self, host: str, port: int) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/r/{token}/{provider}/{tail:.*}", self._handle)
        # handler_cancellation: a client that hangs up (an SDK timing out before its retry) cancels
        # its request here too, so an answer nobody reads is not recorded; a stream already
        # being recorded finishes on its own (see WireSeam._tee).
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the port the OS picked

    def start(self, host: str = "127.0.0.1", port: int = 0) -> WireProxy:
        run_on_wire_loop(self._start(host, port))
        return self

    def stop(self) -> None:
        if self._runner is not None:
            run_on_wire_loop(self._runner.cleanup())
            self._runner = None

    # -- runs ----------------------------------------------------------------------------------
    def register(self, run: Run) -> str:
        token = secrets.token_hex(8)
        self._runs[token] = run
        run._proxy_tokens = [*getattr(run, "_proxy_tokens", []), token]
        return token

    def unregister(self, run: Run) -> None:
        for token in getattr(run, "_proxy_tokens", []):
            self._runs.pop(token, None)

    def active_url(self, provider: str) -> str:
        """A base URL that follows whichever run is active in this process (``/r/active/``).

        For agents built before their run exists (a bring-your-own module whose SDK client read
        ``OPENAI_BASE_URL`` at import): requests go to the single registered run, and fail with
        a clear 409 when there is none or several.
        """
        return f"http://127.0.0.1:{self.port}/r/active/{provider}"

    def base_url(self, run: Run, provider: str) -> str:
        """The base URL an SDK of ``provider`` should use (append the SDK's version segment)."""
        tokens = getattr(run, "_proxy_tokens", None) or [self.register(run)]
        return f"http://127.0.0.1:{self.port}/r/{tokens[0]}/{provider}"

    # -- one request ---------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token = request.match_info["token"]
        provider = request.match_info["provider"]
        if token == "active":
            active = {id(r): r for r in self._runs.values()}
            if len(active) != 1:
                msg = f"tether proxy: /r/active/ needs exactly one active run in this process, found {len(active)}"
                return web.json_response({"error": {"message": msg, "type": "tether_proxy"}}, status=409)
            token = next(k for k, r in self._runs.items() if r is next(iter(active.values())))
        run = self._runs.get(token)
        if run is None or provider not in run.upstreams:
            return web.json_response({"error": {"message": "tether proxy: unknown run or provider", "type": "tether_proxy"}}, status=404)
        path = "/" + request.match_info["tail"]
        wire = WireRequest(
            method=request.method,
            provider=provider,
            path=path,
            url=run.upstreams[provider] + path,
            query=request.query_string,
            headers=list(request.headers.items()),
            body=await request.read(),
        )
        try:
            response = await run.seam.handle(wire)
        except RecoverableStepError as e:
            # 502 is recoverable for every SDK: it retries or fails the attempt, never records.
            return web.json_response({"error": {"message": f"tether proxy: {e}", "type": "tether_upstream"}}, status=502)
        headers = dict(response.headers)
        if response.body is not None and not headers.get("content-type", "").startswith("text/event-stream"):
            return web.Response(status=response.status, headers=headers, body=response.body)  # one write, with its length
        out = web.StreamResponse(status=response.status, headers=headers)
        await out.prepare(request)
        try:
            async for chunk in response.stream:
                await out.write(chunk)
        except RecoverableStepError:
            # Break the connection: the caller must see a failed stream, never a short one.
            if request.transport is not None:
                request.transport.abort()
            return out
        await out.write_eof()
        return out


_proxy: WireProxy | None = None
_proxy_lock = threading.Lock()


def shared_proxy() -> WireProxy:
    """The process's proxy, started on first use on a free loopback port."""
    global _proxy
    with _proxy_lock:
        if _proxy is None:
            _proxy = WireProxy().start()
        return _proxy
