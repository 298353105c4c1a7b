"""``tether tool-runner --request REQUEST.json --tool NAME --socket PATH``: serve the calls of
AgentTool NAME of an exec request on a Unix socket, with NAME's secrets and nobody else's
(``tether.toolrunner``). What the Kubernetes executor runs in a tool's own container beside the
agent's; the agent's ``tether exec`` reaches it through ``$TETHER_TOOL_RUNNERS``.
``--listen [HOST]:PORT --token-file FILE`` instead of ``--socket``: on TCP, answering only frames
that carry the token in FILE (a GPU tool's pod of its own, reached by its pod IP).

Secrets are read first (``tether.secrets``: ``$TETHER_SECRETS_DIR``…), before any tool module is
imported; only the served tools' own are kept. A request that does not name the tool, or a tool
from a module that is not an allowed tool module, exits with code 2 before serving. SIGTERM (the
pod ends) exits 0.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from .. import secrets as tether_secrets
from ..contract import EXIT_TERMINAL
from ..errors import ConfigError
from . import parser, request_is_the_executors, secrets_or_refusal


def main(argv: list[str]) -> int:
    secrets = secrets_or_refusal("tether tool-runner")
    if secrets is None:
        return EXIT_TERMINAL
    p = parser("tool-runner", "Serve the calls of AgentTool(s) of an exec request on a Unix socket, with their own secrets only.")
    p.add_argument("--request", required=True, help="exec request JSON file (the agent's)")
    p.add_argument("--tool", action="append", required=True, help="AgentTool to serve (repeatable)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="Unix socket path to listen on")
    where.add_argument("--listen", metavar="[HOST]:PORT", help="TCP address to listen on (needs --token-file)")
    p.add_argument("--token-file", help="file holding the token a caller on TCP must send")
    args = p.parse_args(argv)
    listen: tuple[str, int] | None = None
    token: str | None = None
    if args.listen is not None:
        host, _, port = args.listen.rpartition(":")
        try:
            listen = (host.strip("[]"), int(port))
            token = Path(args.token_file).read_text().strip() if args.token_file else ""
        except (ValueError, OSError) as e:
            print(f"tether tool-runner: --listen {args.listen} --token-file {args.token_file}: {e}", file=sys.stderr)
            return EXIT_TERMINAL
        if not token:
            print("tether tool-runner: --listen needs a --token-file holding a token", file=sys.stderr)
            return EXIT_TERMINAL
    from ..toolrunner import load_served, serve

    try:
        data = Path(args.request).read_bytes()
        if not request_is_the_executors(data, args.request, "tether tool-runner"):
            return EXIT_TERMINAL
        served = load_served(data.decode(), args.tool, secrets)
    except (ConfigError, ValueError, OSError) as e:
        print(f"tether tool-runner: {e}", file=sys.stderr)
        return EXIT_TERMINAL
    tether_secrets.install_scoped_environ()  # os.environ shows a tool's secrets during its calls
    asyncio.run(serve(served, args.socket, listen=listen, token=token))
    return 0
