"""The ``tether`` subcommands (one module each, imported on use)."""

from __future__ import annotations

import os

#: The exit codes of ``tether run`` and ``tether exec`` (values: tether.entrypoint.EXIT_*), for
#: ``--help``; kept here so that ``tether --help`` does not import Flyte.
EXIT_CODES_HELP = """exit codes:
  0  succeeded
  1  recoverable failure, or the agent process died and retries ran out: run the same command
     again (finished steps replay)
  2  terminal failure or bad input (the cause is printed), or the run id belongs to another manifest
  3  suspended: waiting for a human approval (approve, then run the same command again)"""


def command_name() -> str:
    """How the user runs Tether, for printed hints: ``./tether`` from a checkout (the script sets
    ``$TETHER_COMMAND``), else ``tether``."""
    return os.environ.get("TETHER_COMMAND") or "tether"
