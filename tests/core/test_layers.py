"""The runtime's import layers (runtime/.importlinter): no operator, adapter, framework or kopf;
Kubernetes only for `tether approve`; the CLI on top, the wire below the run (the run builds the
seam; the seams talk to the attempt through tether.attempt), api/canonical/errors at the bottom;
and no import circles at all, imports made only for annotations (`if TYPE_CHECKING:`) included."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "runtime" / ".importlinter"


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--no-cache", str(CONFIG)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Runtime layers KEPT" in proc.stdout and "0 broken" in proc.stdout
    assert "No import circles between the runtime's modules or packages, at any depth KEPT" in proc.stdout


def test_annotations_count_as_imports() -> None:
    """A circle closed only by an annotation's import is a circle all the same: the contracts
    must not exclude them (that setting hid run <-> seam and approvals <-> tools)."""
    config = configparser.ConfigParser()
    config.read(CONFIG)
    assert config["importlinter"].getboolean("exclude_type_checking_imports") is False
