"""The conformance suite without an adapter kit is a usage error naming TETHER_KIT, never a
green run of zero tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_conformance_without_kit_fails_loudly() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_KIT"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/conformance", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode not in (0, 5), out  # 5 = no tests collected
    assert "TETHER_KIT=adapters/<id>/tests/kit.py" in out, out
