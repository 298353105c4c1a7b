"""benchmarks/kind_pods.py (runs in real pods on the kind cluster) with one run and one pod kill (and one with a standby
pod, and both again with warm pods),
and benchmarks/chaos_kind.py with the operator killed once during two runs:
it fails when the benchmark breaks. Figures are not checked (tests/support/benchmarks.py); chaos_kind's pass/fail
properties are (behaviour, not speed)."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import smoke


def test_kind_pods(tmp_path: Path) -> None:
    figures = smoke(
        "kind_pods.py", "--runs", "1", "--kills", "1", "--standby", "--warm-pods", results=tmp_path, name="kind_pods", timeout=1200
    )
    assert (figures["runs"], figures["kills"]) == (1, 1) and "standby_pod_kill_to_first_replayed_turn_p50_s" in figures
    assert "warm_apply_to_first_model_call_p50_s" in figures and "warm_pod_kill_to_first_replayed_turn_p50_s" in figures


def test_chaos_kind(tmp_path: Path) -> None:
    """benchmarks/chaos_kind.py's scenario (a) at its smallest: 2 runs, one at a time, the operator
    killed once while one runs (the operator's log kept with --logs); every property it reports
    must hold (all runs Succeeded, never two live pods, no status backwards, each scripted turn
    answered once)."""
    figures = smoke("chaos_kind.py", "--scenarios", "a", "--runs", "2", "--operator-kills", "1", "--kill-gap", "0", "2",
                    "--concurrency", "1", "--logs", str(tmp_path / "logs"), results=tmp_path, name="chaos_kind", timeout=900)  # fmt: skip
    assert figures["a"]["operator_kills"] == 1, figures
    assert list((tmp_path / "logs").glob("a-*/operator-*.log")), "the operator's log followed"
    assert figures["a"]["properties"] and figures["a"]["pass"], figures["a"]
