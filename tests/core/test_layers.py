"""The runtime's import layers (runtime/.importlinter): no operator, adapter, framework or kopf;
Kubernetes only for `tether approve`; the CLI on top, the wire below the run (the run builds the
seam, the wire reads the active run from tether.current), api/canonical/errors at the bottom."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache", str(REPO / "runtime" / ".importlinter")], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Runtime layers KEPT" in proc.stdout and "0 broken" in proc.stdout
