"""The ``tether`` subcommands (one module each, imported on use)."""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..contract import EXIT_CODES_HELP as EXIT_CODES_HELP  # for --help, without importing Flyte
from ..contract import REQUEST_SHA256_ENV

if TYPE_CHECKING:
    from ..secrets import Secrets


def command_name() -> str:
    """The program name in usage lines and printed hints: always ``tether`` (a checkout's
    ``./tether`` script is put on the PATH as ``tether``: README, Install), so that every hint
    reads the same wherever it is copied from."""
    return "tether"


def agentrun_refused(command: str, run: str, how: str) -> bool:
    """A ``NAMESPACE/NAME`` run is an AgentRun, the cluster's to act on, not a run id of this
    store: print ``tether COMMAND: HOW`` (what does it there, ``{namespace}`` and ``{name}``
    filled in) on stderr and return True (the command exits 2). False for a run id."""
    namespace, slash, name = run.partition("/")
    if slash:
        print(f"{command_name()} {command}: " + how.format(namespace=namespace, name=name), file=sys.stderr)
    return bool(slash)


def parser(command: str, description: str, *, exit_codes: bool = False) -> argparse.ArgumentParser:
    """The argument parser of ``tether <command>``; ``exit_codes``: its --help ends with what the
    exit codes mean (the commands that run an attempt)."""
    return argparse.ArgumentParser(
        prog=f"{command_name()} {command}",
        description=description,
        epilog=EXIT_CODES_HELP if exit_codes else None,
        formatter_class=argparse.RawDescriptionHelpFormatter if exit_codes else argparse.HelpFormatter,
    )


def store_option(p: argparse.ArgumentParser, note: str = "") -> None:
    """``--store``, for the commands that read or write a run's records in a store (default: the
    local store ``tether run`` uses)."""
    from ..stores import default_store_url

    p.add_argument("--store", default=None, help=f"store URL (default {default_store_url()}{note})")


def request_is_the_executors(data: bytes, where: str, command: str) -> bool:
    """Whether the exec request ``data`` (read from ``where``) is the one the executor wrote:
    with ``$TETHER_REQUEST_SHA256`` set (the Kubernetes executor sets it in every container of a
    runner pod), its sha256 must match; else this says why on stderr. Every command that reads a
    request checks it: a swapped request could name another run (its store keys) or other tools."""
    expected = os.environ.get(REQUEST_SHA256_ENV)
    got = hashlib.sha256(data).hexdigest()
    if expected is None or got == expected.strip().lower():
        return True
    print(
        f"{command}: the request {where} is not the one the executor wrote (its sha256 {got} differs from "
        f"${REQUEST_SHA256_ENV}): refusing to run it",
        file=sys.stderr,
    )
    return False


def secrets_or_refusal(command: str) -> Secrets | None:
    """The attempt's secrets, read first thing (before any tool or agent module is imported), or
    None after saying why on stderr (the caller exits terminal)."""
    from .. import secrets

    try:
        return secrets.load()
    except (secrets.SecretsError, OSError) as e:
        print(f"{command}: secrets: {e}", file=sys.stderr)
        return None


#: How often a waiting pod reads its go or request file: a stat and a read of a tmpfs file.
POLL_SECONDS = 0.05


def told(path: Path) -> bool:
    """Whether ``path`` holds anything (a downward API file the operator fills: a standby's go,
    a warm pod's request)."""
    try:
        return bool(path.read_text().strip())
    except FileNotFoundError:
        return False


def wait_for(path: Path, until: float = math.inf) -> bool:
    """Until ``path`` holds anything (True), a stop is asked (SIGTERM, the pod deleted: False) or
    the time is ``until`` (epoch seconds: False)."""
    from .. import stopping

    while not stopping.requested() and time.time() < until:
        if told(path):
            return True
        time.sleep(POLL_SECONDS)
    return False
