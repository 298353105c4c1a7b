"""``tether exec REQUEST.json --store URL``: one attempt of an AgentRun, as a Flyte local
execution. Executors (the operator's local executor, ``tether run``) start it and read the exit
code: 0 succeeded, 1 recoverable (start again), 2 terminal, 3 suspended awaiting approval.

Secrets (``tether.secrets``) are read first, from ``$TETHER_SECRETS_DIR`` or ``$TETHER_SECRETS``
(removed from the environment then), before any agent or tool module is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .. import secrets as tether_secrets
from . import EXIT_CODES_HELP, command_name

EXIT_TERMINAL = 2  # tether.entrypoint's; not imported before the secrets are in hand


def main(argv: list[str]) -> int:
    try:
        secrets = tether_secrets.load()
    except (tether_secrets.SecretsError, OSError) as e:
        print(f"tether exec: secrets: {e}", file=sys.stderr)
        return EXIT_TERMINAL
    p = argparse.ArgumentParser(
        prog=f"{command_name()} exec",
        description="One attempt of an AgentRun request, as a Flyte local execution.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("request", help="exec request JSON file ('-' for stdin)")
    p.add_argument("--store", required=True, help="store URL: a directory, file:///dir or s3://bucket/prefix?endpoint_url=...")
    p.add_argument("--progress", action="store_true", help="print a line per step")
    args = p.parse_args(argv)
    text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text()
    from ..api import PROVIDER_KEY_ENV, ExecRequest

    try:
        request = ExecRequest.model_validate_json(text)
    except ValueError as e:
        print(f"tether exec: invalid request: {e}", file=sys.stderr)
        return EXIT_TERMINAL
    tether_secrets.use(secrets, PROVIDER_KEY_ENV.get(request.spec.model.provider))

    import flyte

    from ..entrypoint import agent_run

    if args.progress:
        os.environ["TETHER_PROGRESS"] = "1"
    flyte.init()
    run = flyte.run(agent_run, request.model_dump_json(by_alias=True), args.store)
    outcome = json.loads(run.outputs()[0])
    print(json.dumps(outcome), flush=True)
    if outcome.get("error"):
        print(f"tether exec: {outcome['error']}", file=sys.stderr)
    return int(outcome["exit_code"])
