"""benchmarks/crash_resume_agents.py (the reference scenario through this adapter and `tether
exec`, cold and warm retry) at its smallest scale: it fails when the benchmark breaks. Figures
are not checked (tests/support/benchmarks.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.benchmarks import smoke


def test_crash_resume_agents(tmp_path: Path) -> None:
    figures = smoke("crash_resume_agents.py", "--scale", "0.01", results=tmp_path, name="crash_resume_agents")
    assert figures["scale"] == 0.01 and "warm" in figures
