"""The operator's import layers (operator/.importlinter): runtime below operator, no agent
framework in the operator, one module for the Kubernetes API, handlers above the rest, and in
the Kubernetes executor the attempts above a GPU tool's pods and the warm pods above the pods' shape (no circle,
typing-only imports included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache", str(REPO / "operator" / ".importlinter")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
