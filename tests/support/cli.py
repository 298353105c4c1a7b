"""The ``tether`` command as a user types it, for tests that drive the CLI from outside."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tether(*args: str, store: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`./tether ARGS --store STORE` from the checkout, without the caller's provider keys."""
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k not in ("TETHER_COMMAND", "TETHER_ENV")}
    return subprocess.run(
        ["./tether", *args, "--store", str(store)],
        cwd=REPO,
        env={**clean, "OPENAI_AGENTS_DISABLE_TRACING": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
