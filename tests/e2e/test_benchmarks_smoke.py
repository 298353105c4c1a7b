"""benchmarks/kind_pods.py (runs in real pods on the kind cluster) with one run and one pod kill (and one with a standby pod):
it fails when the benchmark breaks. Figures are not checked (tests/support/benchmarks.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import smoke


def test_kind_pods(tmp_path: Path) -> None:
    figures = smoke("kind_pods.py", "--runs", "1", "--kills", "1", "--standby", results=tmp_path, name="kind_pods", timeout=900)
    assert (figures["runs"], figures["kills"]) == (1, 1) and "standby_pod_kill_to_first_replayed_turn_p50_s" in figures
