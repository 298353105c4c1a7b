"""benchmarks/operator_submit.py (apply -> submitted, the operator's memory with many AgentRuns)
with two timed runs and three present, and operator_scale.py (runs applied at a rate, the
kubernetes executor) with four runs: it fails when a benchmark breaks. It starts its own
control plane from $TETHER_K8S_BIN. Figures are not checked (tests/support/benchmarks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import smoke

pytestmark = pytest.mark.kube


def test_operator_submit(tmp_path: Path) -> None:
    figures = smoke("operator_submit.py", "--runs", "2", "--total", "3", results=tmp_path, name="operator_submit")
    assert (figures["runs_timed"], figures["agentruns_present"]) == (2, 3)


def test_operator_scale(tmp_path: Path) -> None:
    figures = smoke(
        "operator_scale.py",
        "--runs",
        "4",
        "--moving",
        "1",
        "--moving-seconds",
        "3",
        "--window",
        "3",
        results=tmp_path,
        name="operator_scale",
    )
    assert (figures["runs"], figures["moving_runs"]) == (4, 1)
    assert figures["status_lag_writes"] >= 1 and figures["error_events"] == 0


def test_metrics_overhead(tmp_path: Path) -> None:
    figures = smoke("metrics_overhead.py", "--updates", "50", "--runs", "20", "--repeat", "1", results=tmp_path, name="metrics_overhead")
    assert (figures["updates_timed"], figures["runs_scraped"]) == (50, 20)
    assert figures["metrics_us"] > 0 and figures["look_us"] > 0
