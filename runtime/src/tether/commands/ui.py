"""``tether ui [--port N] [--host H] [--store URL] [--show-content]``: a read-only view of a store's
runs in the browser: the runs list (phase, framework, cost) and per run its attempts and steps.

Binds 127.0.0.1 by default and answers only requests addressed to that host by name (a web page
elsewhere cannot read it through DNS rebinding). Message content (the turns, tool results, the
run's result) is shown only with --show-content, or when
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true (the switch the traces use) is set."""

from __future__ import annotations

import asyncio
import html
import os
import sys
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..runview import HEADERS, local_rows, page, read_run, run_body, runs_table
from ..stores import Store, open_store
from . import parser, store_option

#: The content switch shared with the traces (the OpenTelemetry GenAI convention's variable).
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def content_default(env: dict[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get(CONTENT_ENV, "").strip().lower() == "true"


def app(store: Store, *, content: bool, hosts: list[str] | None) -> web.Application:
    """The view's routes; ``hosts``: the Host headers answered (None: any; filled in once the
    port is bound)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if hosts is not None and request.host not in hosts:
            return web.Response(status=421, text=f"this server answers for {', '.join(hosts)} only\n")
        response = await handler(request)
        response.headers.update(HEADERS)
        return response

    async def runs(_: web.Request) -> web.Response:
        rows = await asyncio.to_thread(local_rows, store)
        body = f'<h1>Tether runs</h1><p class="note">store {html.escape(store.url)}</p>{runs_table(rows)}'
        return web.Response(text=page("Tether runs", body), content_type="text/html")

    async def one(request: web.Request) -> web.Response:
        run_id = request.match_info["run"]
        view = await asyncio.to_thread(read_run, store, run_id, content=content)
        if view is None:
            return web.Response(
                status=404, text=page("Not found", f"<p>No run {html.escape(run_id)} in the store.</p>"), content_type="text/html"
            )
        return web.Response(text=page(f"Run {run_id}", '<p><a href="/">all runs</a></p>' + run_body(view)), content_type="text/html")

    application = web.Application(middlewares=[guard])
    application.router.add_get("/", runs)
    application.router.add_get("/runs/{run}", one)
    return application


def main(argv: list[str]) -> int:
    p = parser("ui", __doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    store_option(p)
    p.add_argument(
        "--show-content", action="store_true", default=content_default(), help=f"show message content (default: ${CONTENT_ENV}=true)"
    )
    args = p.parse_args(argv)
    store = open_store(args.store)
    return asyncio.run(_serve(store, args.host, args.port, args.show_content))


async def _serve(store: Store, host: str, port: int, content: bool) -> int:
    hosts: list[str] | None = [] if host in LOOPBACK else None
    runner = web.AppRunner(app(store, content=content, hosts=hosts), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    if hosts is not None:
        hosts += [f"{name}:{bound}" for name in ("127.0.0.1", "localhost", "[::1]")]
    if hosts is None:
        print(f"tether ui: WARNING: bound to {host}: anyone who reaches it sees every run in the store (there is no sign-in)", flush=True)
    shown = f"[{host}]" if ":" in host else host
    print(f"tether ui: http://{shown}:{bound}/  (store {store.url}; message content {'shown' if content else 'hidden'})", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
