"""``tether store-proxy --request REQUEST.json --store URL --socket PATH``: serve the store to one
run (the request's) on a Unix socket, holding the store credentials so that the agent's process
does not (``tether.stores.proxy``: which keys a run may touch). What the Kubernetes executor runs
beside the agent's container; the agent opens ``tether+unix://PATH``. SIGTERM exits 0.
``--wait-for-request``: a warm pod's (``tether exec --warm-pod``): the request file is empty until a
run claims the pod; the proxy listens once it holds the run's request.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from ..contract import EXIT_TERMINAL
from . import parser, request_is_the_executors, wait_for


def main(argv: list[str]) -> int:
    p = parser("store-proxy", "Serve one run's keys of a store on a Unix socket.")
    p.add_argument("--request", required=True, help="the run's exec request JSON file")
    p.add_argument("--store", required=True, help="the real store URL (this process holds its credentials)")
    p.add_argument("--socket", required=True, help="Unix socket path to listen on")
    p.add_argument("--wait-for-request", action="store_true", help="wait until the request file is not empty (a warm pod's)")
    args = p.parse_args(argv)
    from ..contract import ExecRequest
    from ..stores import open_store
    from ..stores.proxy import RunKeys, serve

    if args.wait_for_request:
        from .. import stopping

        stopping.install()
        if not wait_for(Path(args.request)):
            return 0  # stopped before a run claimed the pod
    try:
        data = Path(args.request).read_bytes()
        if not request_is_the_executors(data, args.request, "tether store-proxy"):  # another run's id: its keys
            return EXIT_TERMINAL
        request = ExecRequest.model_validate_json(data)
    except (OSError, ValueError) as e:
        print(f"tether store-proxy: invalid request: {e}", file=sys.stderr)
        return EXIT_TERMINAL
    scope = RunKeys(request.run_id, request.namespace)
    asyncio.run(serve(open_store(args.store), scope, args.socket))
    return 0
