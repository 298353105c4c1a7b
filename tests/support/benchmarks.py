"""Smoke runs of benchmarks/: each script at its smallest scale, as a subprocess of this
environment's Python, writing its results file to a temporary directory
(``$TETHER_BENCH_RESULTS``), never over the committed figures in benchmarks/results/.

What a smoke run checks is that the benchmark still works, not its figures: exit 0, its last
line one JSON object, and the results file holding the same figures."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.kube import REPO_ROOT

COMMITTED = REPO_ROOT / "benchmarks" / "results"


def _committed() -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(COMMITTED.glob("*.json"))}


def smoke(script: str, *args: str, results: Path, name: str, timeout: float = 300, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs ``benchmarks/<script> <args>``; returns the figures of its results file ``<name>.json``."""
    before = _committed()
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / script), *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {}), "TETHER_BENCH_RESULTS": str(results)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"benchmarks/{script} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(last, dict) and last, f"benchmarks/{script}: its last line is not a JSON object of figures"
    record = json.loads((results / f"{name}.json").read_text())
    assert record["benchmark"] == name and record["command"].startswith(f"benchmarks/{script}")
    assert record["figures"] == last
    assert _committed() == before, "a smoke run changed benchmarks/results/"
    return dict(record["figures"])
