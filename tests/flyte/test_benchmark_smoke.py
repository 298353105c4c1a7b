"""benchmarks/operator_scale.py with the Flyte executor against the real Flyte backend (its own
control plane and backend, from $TETHER_K8S_BIN and scripts/flyte-backend.sh) with two runs: it
fails when the benchmark's Flyte mode breaks. Figures are not checked (tests/support/benchmarks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import smoke

pytestmark = pytest.mark.kube


def test_operator_scale_flyte(tmp_path: Path) -> None:
    figures = smoke(
        "operator_scale.py",
        *("--executor", "flyte", "--runs", "2", "--moving", "1", "--moving-seconds", "3", "--window", "3"),
        results=tmp_path,
        name="operator_scale-flyte",
        timeout=600,
    )
    assert (figures["executor"], figures["runs"], figures["moving_runs"]) == ("flyte", 2, 1)
    assert figures["status_lag_writes"] >= 1 and figures["error_events"] == 0
