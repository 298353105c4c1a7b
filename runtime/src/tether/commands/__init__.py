"""The ``tether`` subcommands (one module each, imported on use)."""

from __future__ import annotations

import os

from ..contract import EXIT_CODES_HELP as EXIT_CODES_HELP  # for --help, without importing Flyte


def command_name() -> str:
    """How the user runs Tether, for printed hints: ``./tether`` from a checkout (the script sets
    ``$TETHER_COMMAND``), else ``tether``."""
    return os.environ.get("TETHER_COMMAND") or "tether"
