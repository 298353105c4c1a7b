"""Every benchmark in the core environment, at its smallest scale (tests/support/benchmarks.py): it
fails when a benchmark breaks, e.g. `crash_resume.py` dying on an argument its loop gained.
The others run in the group with what they need: the openai and langgraph adapters' tests
(their SDKs), tests/controller (a control plane: operator_submit.py), tests/e2e (kind_pods.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.benchmarks import smoke


@pytest.mark.parametrize("via", ["transport", "proxy"])
def test_crash_resume(tmp_path: Path, via: str) -> None:
    figures = smoke("crash_resume.py", "--scale", "0.01", "--via", via, results=tmp_path, name=f"crash_resume-{via}")
    assert figures["via"] == via and figures["scale"] == 0.01


def test_replay_cost(tmp_path: Path) -> None:
    figures = smoke("replay_cost.py", "--steps", "5", "--repeat", "1", "--no-s3", results=tmp_path, name="replay_cost")
    assert set(figures["local"]) == {"5"} and "s3" not in figures


def test_record_overhead(tmp_path: Path) -> None:
    figures = smoke("record_overhead.py", "--calls", "2", "--turns", "1", "--no-s3", results=tmp_path, name="record_overhead")
    assert "local" in figures and "s3" not in figures


def test_trace_overhead(tmp_path: Path) -> None:
    figures = smoke("trace_overhead.py", "--calls", "2", "--turns", "1", results=tmp_path, name="trace_overhead")
    assert figures["chat_spans_received"] >= figures["plain"]["live_turns"] + figures["stream"]["live_turns"] > 0
    assert 0 < figures["plain"]["span_work_us"] < 100_000


def test_mcp_overhead(tmp_path: Path) -> None:
    figures = smoke("mcp_overhead.py", "--calls", "2", "--block", "1", results=tmp_path, name="mcp_overhead")
    assert set(figures["mcp"]) == set(figures["mcp_proxy"]) == set(figures["tether_tool"]) == {"direct_ms", "journaled_ms", "overhead_ms"}
