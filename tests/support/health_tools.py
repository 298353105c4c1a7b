"""What Argo CD and Flux conclude about objects: tests/support/health (`tether-health`), built and
cached by scripts/health-tools.sh, runs an argocd-cm's health Lua scripts the way Argo CD does
(gopher-lua) and kstatus (sigs.k8s.io/cli-utils), which Flux's health checks use.

``tether_health()`` is the binary: ``$TETHER_HEALTH_BIN/tether-health`` when set, else the
script's (cached; a cold build takes about a minute). ``assess(objects, argocd_cm)`` returns, per
object name, ``{"kind", "name", "argocd": {"status", "message"}, "kstatus": {"status", "message"}}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from tests.support.kube import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "health-tools.sh"


@cache
def tether_health() -> Path:
    env_bin = os.environ.get("TETHER_HEALTH_BIN")
    if env_bin:
        return Path(env_bin) / "tether-health"
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1]) / "tether-health"


def assess(objects: dict[str, Any], argocd_cm: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Argo CD's health and kstatus of each object of `objects` (one object or a List)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as cm:
        json.dump(argocd_cm, cm)
        cm.flush()
        proc = subprocess.run([str(tether_health()), cm.name], input=json.dumps(objects), capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"tether-health failed (exit {proc.returncode}): {proc.stderr}")
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    return {line["name"]: line for line in lines}
